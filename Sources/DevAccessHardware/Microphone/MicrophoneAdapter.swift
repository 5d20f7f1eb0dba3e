import DevAccessCore
import FoundationEssentials
import Glibc

/// Microphones: capture PCM devices of the sound cards udev knows.
///
/// Cards are found through udev, not `snd_card_next`: alsa-lib only lists cards
/// whose control node the caller can open, and status must see devices the caller
/// cannot open. alsa-lib then tells which PCMs capture and their names; when the
/// control node cannot be opened, the kernel's node names decide (a capture PCM's
/// node is always `pcmC<card>D<device>c`).
public enum MicrophoneAdapter {
    /// udevd's control socket: present while udevd runs.
    static let udevdControl = "/run/udev/control"

    /// `cards`: look at those card numbers only (nil: all). alsa-lib is asked about each
    /// card looked at, which is most of the probe's cost.
    public static func probe(udev: Udev, cards only: Set<Int>? = nil) -> AdapterReport {
        let sound: [UdevDevice]
        do {
            sound = try udev.devices(subsystem: "sound", attributes: ["id", "number"])
        } catch {
            return AdapterReport(permission: .microphone, devices: [], unavailableReason: error.description)
        }
        let cards = sound.compactMap { device -> (Int, UdevDevice)? in
            guard device.sysname.hasPrefix("card"), let number = kernelNumber(device.sysname.dropFirst(4)) else { return nil }
            return (number, device)
        }
        if cards.isEmpty {
            return AdapterReport(permission: .microphone, devices: [],
                                 unavailableReason: "no sound cards on this machine (udev lists none in 'sound')")
        }
        var devices: [Device] = []
        var notes: [Reason] = []
        let udevdRuns = access(udevdControl, F_OK) == 0
        for (number, card) in cards where (only?.contains(number) ?? true) && isSettled(card, udevdRuns: udevdRuns) {
            let nodes = sound.filter { $0.devnode != nil && $0.parentSyspath == card.syspath }
            let (found, note) = captureDevices(card: number, cardDevice: card, nodes: nodes)
            devices.append(contentsOf: found)
            if let note { notes.append(note) }
        }
        if devices.isEmpty {
            return AdapterReport(permission: .microphone, devices: [], unavailableReason:
                "no capture device: \(cards.count) sound card(s), none with a capture PCM", notes: notes)
        }
        return AdapterReport(permission: .microphone, devices: devices, notes: notes)
    }

    /// Whether a card is looked at now. One udevd has not processed yet (it runs, and the
    /// card has no database entry) has no ID_PATH: its devices would get a passing id
    /// ("card-Loopback-pcm0c") and change ids moments later, which reads as a remove and an
    /// add. It is left out until udevd is done (udevd's event follows). Without udevd, no
    /// card ever has an entry, and every card is looked at.
    static func isSettled(_ card: UdevDevice, udevdRuns: Bool) -> Bool {
        card.isInitialized || !udevdRuns
    }

    static func captureDevices(card number: Int, cardDevice: UdevDevice,
                               nodes: [UdevDevice], asound: String = AsoundNames.root) -> ([Device], Reason?) {
        let cardID = cardDevice.attributes["id"] ?? "card\(number)"
        let control = nodes.first { $0.sysname == "controlC\(number)" }
        let pcmNodes = Dictionary(nodes.compactMap { node -> (Int, UdevDevice)? in
            guard let device = captureDeviceNumber(node.sysname, card: number) else { return nil }
            return (device, node)
        }, uniquingKeysWith: { first, _ in first })

        var pcms: [(device: Int, name: String)]
        var cardName = cardID
        var driver = cardDevice.parentDriver
        var note: Reason?
        do {
            let alsa = try AlsaCard.probe(card: number, controlNode: control?.devnode)
            pcms = alsa.capture.map { ($0.device, $0.name) }
            cardName = alsa.name.isEmpty ? cardID : alsa.name
            driver = alsa.driver.isEmpty ? driver : alsa.driver
        } catch {
            // The names alsa-lib would give, from /proc/asound: the same for every user.
            let names = AsoundNames.read(card: number, cardID: cardID, pcms: pcmNodes.keys.sorted(), root: asound)
            pcms = pcmNodes.keys.sorted().map { ($0, names?.pcms[$0] ?? "") }
            cardName = names?.card ?? cardID
            note = Reason(.probe, "card \(number) (\(cardID)): \(error.description); " +
                          "capture PCMs taken from the kernel's node names")
        }
        let devices = pcms.compactMap { pcm -> Device? in
            guard let node = pcmNodes[pcm.device], let path = node.devnode else { return nil }
            var deviceNodes = [DeviceNode(path: path, role: "capture", required: .readWrite,
                                          state: NodeState.inspect(path, major: node.major, minor: node.minor))]
            if let control, let controlPath = control.devnode {
                // alsa-lib's hw plugin opens the card's control node read-write too.
                deviceNodes.append(DeviceNode(path: controlPath, role: "control", required: .readWrite,
                                              state: NodeState.inspect(controlPath, major: control.major,
                                                                       minor: control.minor)))
            }
            let base = cardDevice.properties["ID_PATH"].flatMap { $0.isEmpty ? nil : $0 } ?? "card-\(cardID)"
            return Device(permission: .microphone,
                          id: "microphone:\(base)-pcm\(pcm.device)c",
                          name: pcm.name.isEmpty ? "\(cardName) capture \(pcm.device)" : "\(cardName): \(pcm.name)",
                          driver: driver, bus: cardDevice.properties["ID_PATH"],
                          nodes: deviceNodes,
                          details: ["card": String(number), "cardID": cardID, "pcm": String(pcm.device)])
        }
        return (devices, note)
    }

    /// The card a sound node belongs to, from the kernel's node name: `/dev/snd/pcmC1D0c`
    /// and `/dev/snd/controlC1` -> 1; anything else (`pcmC01D0c`, `controlC+1`: no name the
    /// kernel gives) -> nil.
    public static func cardNumber(ofNode path: String) -> Int? {
        let name = path.split(separator: "/").last.map(String.init) ?? ""
        if name.hasPrefix("controlC") { return kernelNumber(name.dropFirst("controlC".count)) }
        guard name.hasPrefix("pcmC"), let d = name.firstIndex(of: "D") else { return nil }
        return kernelNumber(name[name.index(name.startIndex, offsetBy: 4)..<d])
    }

    /// `pcmC1D0c` on card 1 -> 0; playback nodes, other cards and names the kernel does
    /// not give (`pcmC1D00c`, `pcmC1D-1c`) -> nil.
    static func captureDeviceNumber(_ sysname: String, card: Int) -> Int? {
        let prefix = "pcmC\(card)D"
        guard sysname.hasPrefix(prefix), sysname.hasSuffix("c") else { return nil }
        return kernelNumber(sysname.dropFirst(prefix.count).dropLast())
    }

    /// A card or device number as the kernel writes it into a sound node's name (`%i`):
    /// decimal digits, no sign, no leading zero. `Int(_:)` alone takes `+1`, `-1` and `01`,
    /// so `pcmC0000D0p` was card 0's node and `controlC-1` a card -1's (the `uevent` fuzz
    /// target found it).
    static func kernelNumber(_ text: Substring) -> Int? {
        let digits = text.utf8
        guard let first = digits.first, digits.allSatisfy({ $0 >= UInt8(ascii: "0") && $0 <= UInt8(ascii: "9") }),
              first != UInt8(ascii: "0") || digits.count == 1 else { return nil }
        return Int(text)
    }
}
