import CAlsa
import Glibc
import DevAccessSystem

/// What alsa-lib's control interface says about one card.
struct AlsaCard: Sendable, Hashable {
    struct CapturePCM: Sendable, Hashable {
        var device: Int
        var name: String
    }

    var number: Int
    var id: String
    var name: String
    var driver: String
    var capture: [CapturePCM]

    struct ProbeError: Error, CustomStringConvertible {
        var card: Int
        var code: CInt
        /// Why the control node itself does not open, when alsa-lib's answer hides it.
        var node: (path: String, errno: Errno)?

        var description: String {
            let cause = node.map { "\($0.path): \($0.errno)" } ?? String(cString: snd_strerror(code))
            return "alsa-lib could not open the control device of card \(card): \(cause)"
        }
    }

    /// Opens `hw:N` and lists the PCM devices that have a capture stream
    /// (snd_ctl_pcm_next_device + snd_ctl_pcm_info with SND_PCM_STREAM_CAPTURE).
    /// `controlNode` (udev's devnode of controlCN) names the real cause when alsa-lib fails.
    static func probe(card number: Int, controlNode: String? = nil) throws(ProbeError) -> AlsaCard {
        devaccess_alsa_silence_errors()
        var ctl: OpaquePointer?
        let rc = snd_ctl_open(&ctl, "hw:\(number)", SND_CTL_NONBLOCK)
        guard rc >= 0, let ctl else {
            throw ProbeError(card: number, code: rc, node: controlNode.flatMap { nodeProblem($0, reported: -rc) })
        }
        defer { snd_ctl_close(ctl) }

        var cardInfo: OpaquePointer?
        guard snd_ctl_card_info_malloc(&cardInfo) >= 0, let cardInfo else {
            throw ProbeError(card: number, code: -ENOMEM)
        }
        defer { snd_ctl_card_info_free(cardInfo) }
        let infoRC = snd_ctl_card_info(ctl, cardInfo)
        guard infoRC >= 0 else { throw ProbeError(card: number, code: infoRC) }

        var pcmInfo: OpaquePointer?
        guard snd_pcm_info_malloc(&pcmInfo) >= 0, let pcmInfo else {
            throw ProbeError(card: number, code: -ENOMEM)
        }
        defer { snd_pcm_info_free(pcmInfo) }

        var capture: [CapturePCM] = []
        var device: CInt = -1
        while snd_ctl_pcm_next_device(ctl, &device) >= 0 && device >= 0 {
            snd_pcm_info_set_device(pcmInfo, UInt32(device))
            snd_pcm_info_set_subdevice(pcmInfo, 0)
            snd_pcm_info_set_stream(pcmInfo, SND_PCM_STREAM_CAPTURE)
            // Fails with ENOENT when the device has no capture stream.
            if snd_ctl_pcm_info(ctl, pcmInfo) >= 0 {
                capture.append(CapturePCM(device: Int(device), name: string(snd_pcm_info_get_name(pcmInfo))))
            }
        }
        return AlsaCard(number: number, id: string(snd_ctl_card_info_get_id(cardInfo)),
                        name: string(snd_ctl_card_info_get_name(cardInfo)),
                        driver: string(snd_ctl_card_info_get_driver(cardInfo)), capture: capture)
    }

    /// alsa-lib reports a control node the user may not open (EACCES on root:audio 0660) as
    /// ENOENT, after its configuration's fallbacks: the node, opened as alsa-lib's hw
    /// plugin opens it, says the real errno. nil when it agrees or opens.
    static func nodeProblem(_ path: String, reported: CInt) -> (path: String, errno: Errno)? {
        let descriptor = open(path, O_RDWR | O_NONBLOCK | O_CLOEXEC | O_NOCTTY)
        guard descriptor < 0 else {
            close(descriptor)
            return nil
        }
        let found = Errno.current
        return found.rawValue == reported ? nil : (path, found)
    }

    private static func string(_ pointer: UnsafePointer<CChar>?) -> String {
        pointer.map { String(cString: $0) } ?? ""
    }
}
