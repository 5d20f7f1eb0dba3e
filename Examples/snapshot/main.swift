import Foundation
import Glibc
import DevAccess

// snapshot [OUTPUT.ppm] [--device ID]: asks devaccessd for the camera (with a reason, for
// as long as this process runs), has it open the camera's node (no ACL entry needed),
// captures one frame by V4L2 mmap streaming and writes it as PPM.

func fail(_ text: String, _ code: Int32) -> Never {
    FileHandle.standardError.write(Data("snapshot: \(text)\n".utf8))
    exit(code)
}

var arguments = Array(CommandLine.arguments.dropFirst())
var deviceID: String?
if let index = arguments.firstIndex(of: "--device"), index + 1 < arguments.count {
    deviceID = arguments[index + 1]
    arguments.removeSubrange(index...index + 1)
}
let output = arguments.first ?? "snapshot.ppm"

let access = DeviceAccess()
do {
    try await access.request(.camera, reason: "take one snapshot to \(output)", term: .once)
    let camera = try await access.status(.camera)
    guard let device = camera.devices.first(where: { deviceID == nil || $0.device.id == deviceID }) else {
        fail("no camera\(deviceID.map { " '\($0)'" } ?? "") is present", 69)
    }
    let file = try await access.open(.camera, device: device.device.id)
    guard let fd = file.rawValue else { fail("devaccessd passed no descriptor", 70) }
    let frame = try V4L2Capture(fd: fd).captureOne()
    let image = PPM.encode(frame)
    guard FileManager.default.createFile(atPath: output, contents: Data(image)) else {
        fail("cannot write \(output)", 73)
    }
    print("wrote \(output): \(frame.width)x\(frame.height) from \(file.node) (\(device.device.name))")
} catch let error as DeviceAccessError {
    fail(error.description, error == .cancelled ? 130 : 77)
} catch {
    fail("\(error)", 74)
}
