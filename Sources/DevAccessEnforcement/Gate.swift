import Glibc
import DevAccessCore
import DevAccessHardware
import DevAccessLedger
import DevAccessSystem

extension DenyByDefaultRules {
    /// Looks for the file under `root` (a DESTDIR staging tree; empty: the live system).
    public static func find(root: String = "") -> (path: String?, masked: String?) {
        for directory in directories {
            let path = directory + "/" + fileName
            var info = stat()
            guard lstat(root + path, &info) == 0 else { continue }
            // udev's own way to disable a rules file: a same-named link to /dev/null earlier in the order.
            if (info.st_mode & S_IFMT) == S_IFLNK,
               (try? FileManagerLink.destination(root + path)) == "/dev/null" {
                return (nil, path)
            }
            return (path, nil)
        }
        return (nil, nil)
    }
}

public enum GateAnalyzer {
    /// `records`: the ACL entries devaccess made (nil when the ledger cannot be read).
    /// `tags`: a node's current udev tags by major:minor (nil: udev does not know it).
    public static func analyze(_ reports: [AdapterReport], records: [ACLEntryRecord]?,
                               tags: (UInt32, UInt32) -> Set<String>?, root: String = "") -> GateReport {
        var nodes: [GateNode] = []
        var seen = Set<String>()
        var groupMembers: [UInt32: [String]] = [:]
        func members(_ gid: UInt32) -> [String] {
            if let known = groupMembers[gid] { return known }
            let names = UserDatabase.members(ofGroup: gid).map { UserDatabase.userName($0) ?? String($0) }
            groupMembers[gid] = names
            return names
        }
        var tagged = 0
        var checked = 0
        for report in reports where report.permission == .camera || report.permission == .microphone {
            for device in report.devices {
                for node in device.nodes where node.role == "capture" && seen.insert(node.path).inserted {
                    guard let facts = node.facts else { continue }
                    var openers = openersByMode(facts, required: node.required, records: records, members: members)
                    if let current = tags(facts.major, facts.minor) {
                        checked += 1
                        if current.contains("uaccess") {
                            tagged += 1
                            openers.append(GateOpener(
                                kind: .seat, name: "", members: nil, access: .readWrite, devaccess: false,
                                message: "the active seat user: the node has udev's 'uaccess' tag, so logind gives "
                                    + "whoever is logged in at the seat an ACL entry"))
                        }
                    }
                    nodes.append(GateNode(path: node.path, permission: report.permission, deviceID: device.id,
                                          openers: openers))
                }
            }
        }
        let found = DenyByDefaultRules.find(root: root)
        var rules = DenyByDefaultRules(installed: found.path, active: nil, message: "")
        switch (found.path, found.masked) {
        case (nil, let masked?):
            rules.active = false
            rules.message = "\(masked) masks \(DenyByDefaultRules.fileName) (a link to /dev/null): capture nodes keep 'uaccess'"
        case (nil, nil):
            rules.active = false
            rules.message = "not installed (opt-in): capture nodes keep 'uaccess' and the seat user opens them; "
                + "install udev-rules/\(DenyByDefaultRules.fileName) in /etc/udev/rules.d (devaccessd(8), DENY BY DEFAULT)"
        case (let path?, _):
            if checked == 0 {
                rules.message = "\(path) is installed; no capture node known to udev to confirm it applies"
            } else if tagged == 0 {
                rules.active = true
                rules.message = "\(path) is installed and in force: no capture node has the 'uaccess' tag"
            } else {
                rules.active = false
                rules.message = "\(path) is installed, but \(tagged) capture node(s) still have 'uaccess': run "
                    + "'udevadm control --reload && udevadm trigger -s video4linux -s sound'"
            }
        }
        return GateReport(denyByDefault: rules, nodes: nodes)
    }

    /// Location's receivers (gpsd's serial nodes) and who reads them without devaccessd: a
    /// way around a gpsd gated to devaccessd (config/nftables/devaccess-gpsd.nft).
    public static func receivers(_ report: AdapterReport) -> [GateNode] {
        var seen = Set<String>()
        return report.devices.flatMap { device in
            device.nodes.compactMap { node -> GateNode? in
                guard node.role == "receiver", seen.insert(node.path).inserted, let facts = node.facts else { return nil }
                let openers = openersByMode(facts, required: node.required, records: nil) { gid in
                    UserDatabase.members(ofGroup: gid).map { UserDatabase.userName($0) ?? String($0) }
                }
                return GateNode(path: node.path, permission: .location, deviceID: device.id, openers: openers)
            }
        }
    }

    /// Owner, groups, named entries and `other`, evaluated as the kernel would (masks applied).
    static func openersByMode(_ facts: NodeFacts, required: AccessMode, records: [ACLEntryRecord]?,
                              members: (UInt32) -> [String]) -> [GateOpener] {
        var openers: [GateOpener] = []
        let acl = facts.acl ?? []
        let mask = acl.first { $0.tag == .mask }?.permissions
        func masked(_ mode: AccessMode) -> AccessMode { (mask.map { mode.intersection($0) } ?? mode).intersection(required) }
        let ownerBits = AccessMode(bits: (facts.mode >> 6) & 0o7)
        let groupBits = acl.first { $0.tag == .groupObject }?.permissions ?? AccessMode(bits: (facts.mode >> 3) & 0o7)
        let otherBits = AccessMode(bits: facts.mode & 0o7)
        if facts.ownerUID != 0, !ownerBits.intersection(required).isEmpty {
            let name = facts.ownerName ?? String(facts.ownerUID)
            openers.append(GateOpener(kind: .owner, name: name, members: nil, access: ownerBits.intersection(required),
                                      devaccess: false, message: "\(name) owns the node"))
        }
        let group = masked(groupBits)
        if !group.isEmpty && facts.groupGID != 0 {
            let name = facts.groupName ?? String(facts.groupGID)
            let who = members(facts.groupGID)
            openers.append(GateOpener(kind: .group, name: name, members: who, access: group, devaccess: false,
                                      message: "members of group '\(name)' (\(who.isEmpty ? "none now" : who.joined(separator: ", ")))"))
        }
        for entry in acl {
            let access = masked(entry.permissions)
            guard !access.isEmpty else { continue }
            switch entry.tag {
            case .group(let gid):
                let name = entry.qualifierName ?? UserDatabase.groupName(gid) ?? String(gid)
                let who = members(gid)
                openers.append(GateOpener(kind: .aclGroup, name: name, members: who, access: access, devaccess: nil,
                                          message: "members of group '\(name)' through the ACL entry \(entry.text)"))
            case .user(let uid):
                let name = entry.qualifierName ?? UserDatabase.userName(uid) ?? String(uid)
                let ours = records.map { $0.contains { $0.nodePath == facts.path && $0.qualifier == .user(uid) } }
                if ours == true { continue }
                openers.append(GateOpener(kind: .aclUser, name: name, members: nil, access: access, devaccess: ours,
                                          // The same words whether or not the ledger could be read; JSON's
                                          // `devaccess` says which.
                                          message: "\(name) through the ACL entry \(entry.text)"))
            default:
                continue
            }
        }
        if !otherBits.intersection(required).isEmpty {
            openers.append(GateOpener(kind: .other, name: "", members: nil, access: otherBits.intersection(required),
                                      devaccess: false, message: "everyone, through the 'other' bits (\(facts.modeOctal))"))
        }
        return openers
    }
}

/// readlink(2) for one path, without following further.
enum FileManagerLink {
    static func destination(_ path: String) throws(Errno) -> String {
        var buffer = [CChar](repeating: 0, count: 4096)
        let count = readlink(path, &buffer, buffer.count - 1)
        guard count >= 0 else { throw Errno.current }
        return String(decoding: buffer.prefix(count).map { UInt8(bitPattern: $0) }, as: UTF8.self)
    }
}
