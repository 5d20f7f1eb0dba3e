import Foundation
import Glibc
import DevAccess

// Runs one DevAccess call as whoever starts it (tests: a real user through setpriv) and
// prints what came back as JSON, one object per line. SIGUSR1 cancels the call's task.
//
//   status [PERMISSION...]
//   request [--required P] [--term once|always|SECONDS] [--reason TEXT] [--no-wait] PERMISSION...
//   location [ACCURACY]
//   watch [PERMISSION...]            (a line per status change, until killed)
//   churn [N]                        (N times: subscribe, take the first status, let go)
//   open PERMISSION DEVICE [NODE]    (reads and writes one byte through the descriptor)

func emit(_ object: [String: Any]) {
    guard let data = try? JSONSerialization.data(withJSONObject: object, options: [.sortedKeys]) else { return }
    FileHandle.standardOutput.write(data + Data("\n".utf8))
}

func describe(_ error: DeviceAccessError) -> [String: Any] {
    let kind: String
    switch error {
    case .unsupported: kind = "unsupported"
    case .denied: kind = "denied"
    case .restricted: kind = "restricted"
    case .notDecided: kind = "notDecided"
    case .noConsentChannel: kind = "noConsentChannel"
    case .brokerUnavailable: kind = "brokerUnavailable"
    case .busy: kind = "busy"
    case .notPermitted: kind = "notPermitted"
    case .noSuchUser: kind = "noSuchUser"
    case .cancelled: kind = "cancelled"
    case .protocol: kind = "protocol"
    }
    var object: [String: Any] = ["error": kind, "message": error.description]
    if let permission = error.permission { object["permission"] = permission.rawValue }
    return object
}

func outcome(_ result: PermissionResult) -> String {
    switch result.outcome {
    case .allowed: return "allowed"
    case .denied: return "denied"
    case .restricted: return "restricted"
    case .unsupported: return "unsupported"
    case .notDecided: return "notDecided"
    case .noConsentChannel: return "noConsentChannel"
    case .pending(let number): return "pending:\(number)"
    }
}

func permissions(_ names: some Sequence<String>) -> [Permission] {
    names.map { Permission(parsing: $0) ?? Permission(rawValue: $0) }
}

func run(_ arguments: [String]) async -> Int32 {
    let access = DeviceAccess()
    guard let command = arguments.first else {
        emit(["error": "usage"])
        return 2
    }
    var rest = Array(arguments.dropFirst())
    do throws(DeviceAccessError) {
        switch command {
        case "status":
            let statuses = try await access.status(rest.isEmpty ? nil : permissions(rest))
            emit(["statuses": statuses.map { ["permission": $0.permission.rawValue, "status": $0.status.rawValue,
                                              "devices": $0.devices.map(\.device.id)] }])
        case "request":
            var required: Set<Permission> = []
            var term: AccessTerm?
            var reason: String?
            var wait = true
            while let option = rest.first, option.hasPrefix("--") {
                rest.removeFirst()
                switch option {
                case "--required": required.insert(permissions([rest.removeFirst()])[0])
                case "--reason": reason = rest.removeFirst()
                case "--no-wait": wait = false
                case "--term":
                    let value = rest.removeFirst()
                    term = value == "once" ? .once : value == "always" ? .always : .for(.seconds(Int64(value) ?? 60))
                default:
                    emit(["error": "usage", "option": option])
                    return 2
                }
            }
            let results = try await access.request(permissions(rest), reason: reason, required: required, term: term,
                                                   waitForApproval: wait)
            emit(["results": results.map { ["permission": $0.permission.rawValue, "outcome": outcome($0),
                                             "allowed": $0.isAllowed, "message": $0.message] }])
        case "watch":
            // One line per status as it comes; runs until killed or the stream ends.
            for await status in access.statusUpdates(rest.isEmpty ? nil : permissions(rest)) {
                emit(["permission": status.permission.rawValue, "status": status.status.rawValue,
                      "reasons": status.reasons.map(\.message), "drift": status.drift.map(\.message),
                      "time": Date().timeIntervalSince1970])
            }
            emit(["ended": true])
        case "churn":
            // Subscribes and lets go again, N times (the first status of each, then the
            // stream is dropped, which ends the subscription).
            let count = Int(rest.first ?? "") ?? 1000
            var received = 0
            for _ in 0..<count {
                for await _ in access.statusUpdates([.camera]) {
                    received += 1
                    break
                }
            }
            emit(["churned": count, "received": received])
        case "open":
            guard rest.count >= 2 else {
                emit(["error": "usage"])
                return 2
            }
            let file = try await access.open(permissions([rest[0]])[0], device: rest[1], node: rest.count > 2 ? rest[2] : nil)
            guard let fd = file.rawValue else { throw .protocol("no descriptor") }
            var info = stat()
            _ = fstat(fd, &info)
            var byte: UInt8 = 0
            let read = Glibc.read(fd, &byte, 1)
            let wrote = Glibc.write(fd, "x", 1)
            emit(["node": file.node, "device": file.device, "access": file.access.symbolic, "read": read, "wrote": wrote,
                  "character": info.st_mode & S_IFMT == S_IFCHR, "rdev": Int(info.st_rdev)])
        case "open-many":
            // COUNT opens of one device in this process, each descriptor closed at once.
            guard rest.count >= 3, let count = Int(rest[0]) else {
                emit(["error": "usage"])
                return 2
            }
            for _ in 0..<count {
                let file = try await access.open(permissions([rest[1]])[0], device: rest[2], node: nil)
                guard file.rawValue != nil else { throw .protocol("no descriptor") }
            }
            emit(["opened": count])
        case "location-updates":
            // The first sample, then the stream is dropped (ending the sampling).
            do {
                for try await reading in access.locationUpdates(accuracy: rest.first.flatMap { LocationAccuracy(rawValue: $0) }) {
                    emit(["accuracy": reading.accuracy.rawValue, "latitude": reading.latitude,
                          "longitude": reading.longitude])
                    break
                }
            } catch let error as DeviceAccessError {
                throw error
            } catch {
                throw .protocol("\(error)")
            }
        case "location":
            let accuracy = rest.first.flatMap { LocationAccuracy(rawValue: $0) }
            let reading = try await access.location(accuracy: accuracy)
            emit(["accuracy": reading.accuracy.rawValue, "latitude": reading.latitude, "longitude": reading.longitude])
        default:
            emit(["error": "usage", "command": command])
            return 2
        }
        return 0
    } catch {
        emit(describe(error))
        return 1
    }
}

// SIGUSR1 (from a test) and SIGINT (Ctrl-C at a terminal) cancel the call's task, as a
// program would on its own cancel button.
signal(SIGUSR1, SIG_IGN)
signal(SIGINT, SIG_IGN)
let call = Task { await run(Array(CommandLine.arguments.dropFirst())) }
// With DEVACCESS_PROBE_READY=1 a first line says when SIGUSR1 cancels (its source is
// registered): a signal sent before that would be lost.
let announcesReady = ProcessInfo.processInfo.environment["DEVACCESS_PROBE_READY"] == "1"
let cancelSources = [SIGUSR1, SIGINT].map { number in
    let source = DispatchSource.makeSignalSource(signal: number, queue: .global())
    // DEVACCESS_PROBE_ON_INT=exit: Ctrl-C ends the process at once instead, no cancellation
    // and no goodbye (a program that crashes or is killed mid-request).
    if number == SIGINT && ProcessInfo.processInfo.environment["DEVACCESS_PROBE_ON_INT"] == "exit" {
        source.setEventHandler { _exit(9) }
    } else {
        source.setEventHandler { call.cancel() }
    }
    if number == SIGUSR1 && announcesReady { source.setRegistrationHandler { emit(["ready": true]) } }
    source.resume()
    return source
}
Task {
    let status = await call.value
    exit(status)
}
dispatchMain()
