/// A snapshot of one udev device: what libudev said about it, copied out of the
/// C handle so it can cross threads and outlive the enumeration.
public struct UdevDevice: Sendable, Hashable {
    public var syspath: String
    public var sysname: String
    public var subsystem: String?
    public var devnode: String?
    /// Device number of the node, when it has one.
    public var major: UInt32
    public var minor: UInt32
    public var action: String?
    public var seqnum: UInt64
    public var properties: [String: String]
    /// The sysfs attributes that were asked for and exist.
    public var attributes: [String: String]
    /// syspath of the parent device (the hardware behind the node), if any.
    public var parentSyspath: String?
    public var parentDriver: String?
    /// Properties of the parent device, for facts udev keeps on the parent (a sound card's ID_PATH).
    public var parentProperties: [String: String]
    /// udevd has processed the device (its database entry exists: properties such as ID_PATH
    /// are there). False on a machine where no udevd runs.
    public var isInitialized: Bool

    public init(syspath: String, sysname: String, subsystem: String? = nil, devnode: String? = nil,
                major: UInt32 = 0, minor: UInt32 = 0, action: String? = nil, seqnum: UInt64 = 0,
                properties: [String: String] = [:], attributes: [String: String] = [:],
                parentSyspath: String? = nil, parentDriver: String? = nil,
                parentProperties: [String: String] = [:], isInitialized: Bool = true) {
        self.syspath = syspath
        self.sysname = sysname
        self.subsystem = subsystem
        self.devnode = devnode
        self.major = major
        self.minor = minor
        self.action = action
        self.seqnum = seqnum
        self.properties = properties
        self.attributes = attributes
        self.parentSyspath = parentSyspath
        self.parentDriver = parentDriver
        self.parentProperties = parentProperties
        self.isInitialized = isInitialized
    }

    /// A device's property list (libudev's, in its order) as `properties`: a property with no
    /// value is an empty string; a name listed twice keeps its last value.
    public static func properties(_ pairs: some Sequence<(name: String, value: String?)>) -> [String: String] {
        var result: [String: String] = [:]
        for pair in pairs { result[pair.name] = pair.value ?? "" }
        return result
    }

    /// The device's current udev tags (`CURRENT_TAGS`; `TAGS` on udev before systemd 247,
    /// which also keeps tags a later rule removed).
    public var currentTags: Set<String> {
        let text = properties["CURRENT_TAGS"] ?? properties["TAGS"] ?? ""
        return Set(text.split(separator: ":").map(String.init))
    }

    /// The sysfs path below /sys/devices, with '/' turned into '-': the last-resort
    /// stable id when udev has not set ID_PATH (no udevd, or an unusual bus).
    public static func sysfsID(_ syspath: String) -> String {
        var path = Substring(syspath)
        if let range = path.firstRange(of: "/devices/") { path = path[range.upperBound...] }
        return path.split(separator: "/").joined(separator: "-")
    }
}
