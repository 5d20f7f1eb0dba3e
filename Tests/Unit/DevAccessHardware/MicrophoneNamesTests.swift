import Foundation
import Testing
import DevAccessCore
@testable import DevAccessHardware

/// A microphone's name is the same for root and a user, and so in `status` (devaccessd's
/// probe, as root) and `devices` (the user's own probe): where the card's control node cannot
/// be opened, the names come from /proc/asound, which every user reads (issue 31: the user's
/// probe said "Loopback capture 0" where root's said "Loopback: Loopback PCM").
@Suite struct MicrophoneNamesTests {
    /// A card (number 7: none on a test machine, so alsa-lib cannot open it) as /proc/asound
    /// and udev show it.
    func card(asound: String, id: String = "Loopback") throws -> [Device] {
        try FileManager.default.createDirectory(atPath: asound + "/card7/pcm0c", withIntermediateDirectories: true)
        try " 7 [Loopback       ]: Loopback - Loopback\n                      Loopback 1\n"
            .write(toFile: asound + "/cards", atomically: true, encoding: .utf8)
        try "\(id)\n".write(toFile: asound + "/card7/id", atomically: true, encoding: .utf8)
        try "card: 7\ndevice: 0\nsubdevice: 0\nstream: CAPTURE\nid: Loopback PCM\nname: Loopback PCM\n"
            .write(toFile: asound + "/card7/pcm0c/info", atomically: true, encoding: .utf8)
        let cardDevice = UdevDevice(syspath: "/sys/devices/virtual/sound/card7", sysname: "card7", subsystem: "sound",
                                    attributes: ["id": "Loopback"])
        let nodes = [
            UdevDevice(syspath: "/sys/devices/virtual/sound/card7/pcmC7D0c", sysname: "pcmC7D0c", subsystem: "sound",
                       devnode: "/nonexistent/snd/pcmC7D0c", major: 116, minor: 200),
            UdevDevice(syspath: "/sys/devices/virtual/sound/card7/controlC7", sysname: "controlC7", subsystem: "sound",
                       devnode: "/nonexistent/snd/controlC7", major: 116, minor: 201),
        ]
        return MicrophoneAdapter.captureDevices(card: 7, cardDevice: cardDevice, nodes: nodes, asound: asound).0
    }

    @Test func theNamesComeFromProcAsoundWhenTheControlNodeCannotBeOpened() throws {
        let asound = NSTemporaryDirectory() + "devaccess-asound-\(getpid())-names"
        defer { try? FileManager.default.removeItem(atPath: asound) }
        #expect(try card(asound: asound).map(\.name) == ["Loopback: Loopback PCM"])
    }

    /// Another card at that number in /proc/asound (its id differs): its names are not taken.
    @Test func anotherCardsNamesAreNotTaken() throws {
        let asound = NSTemporaryDirectory() + "devaccess-asound-\(getpid())-other"
        defer { try? FileManager.default.removeItem(atPath: asound) }
        #expect(try card(asound: asound, id: "Dummy").map(\.name) == ["Loopback capture 0"])
    }
}
