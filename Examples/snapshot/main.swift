import Foundation
import Glibc
import DevAccess

// snapshot [OUTPUT.ppm | -] [--device ID] [--native FOURCC]: asks devaccessd for the camera
// (with a reason, for as long as this process runs), has it open the camera's node (no ACL
// entry needed), captures one frame through libv4l2 as RGB24 and writes it as PPM (`-`:
// to stdout). --native asks the camera for that format and has libv4lconvert convert it.

func fail(_ text: String, _ code: Int32) -> Never {
    FileHandle.standardError.write(Data("snapshot: \(text)\n".utf8))
    exit(code)
}

/// Removes `--name VALUE` from `arguments` and returns VALUE.
func option(_ name: String, _ arguments: inout [String]) -> String? {
    guard let index = arguments.firstIndex(of: name) else { return nil }
    guard index + 1 < arguments.count else { fail("\(name) needs a value", 64) }
    defer { arguments.removeSubrange(index...index + 1) }
    return arguments[index + 1]
}

var arguments = Array(CommandLine.arguments.dropFirst())
let deviceID = option("--device", &arguments)
let nativeName = option("--native", &arguments)
let native: UInt32? = nativeName.map { name in
    guard let code = V4L2Capture.fourcc(name) else {
        fail("--native takes a FOURCC of four characters (NV12, BA81, YU12), not '\(name)'", 64)
    }
    return code
}
let output = arguments.first ?? "snapshot.ppm"

// libv4l2's plugins print to stdout (the mplane plugin: "Using mplane plugin for capture"):
// with the image on stdout, fd 1 points at stderr from here on and the PPM goes to a
// duplicate of the real stdout, so nothing else can land in it.
let imageOut: CInt? = output == "-" ? dup(1) : nil
if let imageOut {
    guard imageOut >= 0, dup2(2, 1) == 1 else { fail("cannot set stdout aside: \(String(cString: strerror(errno)))", 71) }
}

/// Writes the whole image to `fd`; false on a write error.
func writeAll(_ bytes: [UInt8], to fd: CInt) -> Bool {
    var done = 0
    while done < bytes.count {
        let written = bytes[done...].withUnsafeBytes { write(fd, $0.baseAddress, $0.count) }
        if written < 0 && errno == EINTR { continue }
        guard written > 0 else { return false }
        done += written
    }
    return true
}

let access = DeviceAccess()
do {
    try await access.request(.camera, reason: "take one snapshot to \(output == "-" ? "stdout" : output)", term: .once)
    let camera = try await access.status(.camera)
    guard let device = camera.devices.first(where: { deviceID == nil || $0.device.id == deviceID }) else {
        fail("no camera\(deviceID.map { " '\($0)'" } ?? "") is present", 69)
    }
    let file = try await access.open(.camera, device: device.device.id)
    guard let fd = file.takeDescriptor() else { fail("devaccessd passed no descriptor", 70) }
    let frame = try V4L2Capture(fd: fd, native: native).captureOne()
    let image = PPM.encode(frame)
    if let imageOut {
        guard writeAll(image, to: imageOut) else { fail("cannot write the image to stdout: \(String(cString: strerror(errno)))", 73) }
    } else {
        guard FileManager.default.createFile(atPath: output, contents: Data(image)) else { fail("cannot write \(output)", 73) }
    }
    // With `-` this line goes to stderr (fd 1 points there).
    print("wrote \(output): \(frame.width)x\(frame.height)\(nativeName.map { " from \($0)" } ?? "") "
          + "from \(file.node) (\(device.device.name))")
} catch let error as DeviceAccessError {
    fail(error.description, error == .cancelled ? 130 : 77)
} catch {
    fail("\(error)", 74)
}
