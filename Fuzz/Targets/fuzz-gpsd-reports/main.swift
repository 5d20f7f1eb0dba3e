import DevAccessCore
@testable import DevAccessHardware
import FuzzSupport

/// What a gpsd (or whatever listens on its port) sends devaccessd: each line decoded as a
/// report the way the watcher and `devaccess location` decode it. A TPV that decodes must
/// be on the globe with a mode gpsd_json(5) defines. The same bytes as a `--gpsd`
/// HOST:PORT argument.
@_cdecl("LLVMFuzzerTestOneInput")
public func fuzzGpsdReports(_ data: UnsafePointer<UInt8>?, _ size: Int) -> Int32 {
    let input = fuzzInput(data, size)
    for line in input.split(separator: 0x0a) {
        guard let report = try? GpsdReport.decode(Array(line), from: .default) else { continue }
        switch report {
        case .tpv(let tpv):
            fuzzCheck(tpv.violation == nil, "TPV accepted with \(tpv.violation ?? "")")
            let fix = tpv.fix(device: tpv.device)
            if let latitude = fix.latitude { fuzzCheck(abs(latitude) <= 90, "latitude \(latitude)") }
            if let longitude = fix.longitude { fuzzCheck(abs(longitude) <= 180, "longitude \(longitude)") }
        case .poll(let tpvs):
            fuzzCheck(tpvs.allSatisfy { $0.violation == nil }, "POLL accepted with a bad TPV")
        default:
            break
        }
        _ = try? report.banner(from: .default)
    }
    if input.count <= 512 {
        _ = try? GpsdEndpoint(parsing: String(decoding: input, as: UTF8.self))
    }
    return 0
}

runFuzzer(fuzzGpsdReports)
