import Foundation
import DevAccess

// watch [PERMISSION...]: prints each permission's status as it is now, then every change
// devaccessd pushes (grants, revokes, expiries, policy edits, devices plugged in or out).

let names = CommandLine.arguments.dropFirst()
var permissions: [Permission] = []
for name in names {
    guard let permission = Permission(parsing: name) else {
        FileHandle.standardError.write(Data("watch: unknown permission '\(name)'\n".utf8))
        exit(64)
    }
    permissions.append(permission)
}

let formatter = ISO8601DateFormatter()
for await status in DeviceAccess().statusUpdates(permissions.isEmpty ? nil : permissions) {
    let summary = status.reasons.first?.message ?? ""
    let line = "\(formatter.string(from: Date()))  \(status.permission.rawValue.padding(toLength: 10, withPad: " ", startingAt: 0)) "
        + "\(status.status.rawValue.padding(toLength: 13, withPad: " ", startingAt: 0)) \(summary)\n"
    // Unbuffered, so a pipe sees each change as it comes.
    FileHandle.standardOutput.write(Data(line.utf8))
}
FileHandle.standardError.write(Data("watch: devaccessd refused the subscription for good (is it older than this program?)\n".utf8))
exit(69)
