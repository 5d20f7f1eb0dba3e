/// Status = f(hardware, kernel access state, ledger, policy), with reasons.
///
/// Order: no hardware -> `unavailable`; policy forbids -> `restricted`; a recorded
/// denial -> `denied`; otherwise what the kernel lets the user open decides between
/// `authorized`, `limited` and `notDetermined`.
public enum StatusEvaluator {
    public static func evaluate(_ report: AdapterReport, for user: UserIdentity,
                                inputs: DecisionInputs = .none) -> PermissionStatus {
        let devices = report.devices.map { deviceStatus($0, user) }
        let nodeReasons = devices.flatMap { accessReasons($0, user) }
        var reasons: [Reason] = []
        let status: AuthorizationStatus
        let noun = report.permission.rawValue

        if let unavailable = report.unavailableReason {
            status = .unavailable
            reasons.append(Reason(.unavailable, unavailable))
        } else if devices.isEmpty {
            status = .unavailable
            reasons.append(Reason(.unavailable, "no \(noun) device found on this machine"))
        } else if let restriction = inputs.policyRestriction {
            status = .restricted
            reasons.append(restriction)
        } else if let denial = inputs.ledgerDenial {
            status = .denied
            reasons.append(denial)
        } else {
            let usable = devices.filter(\.usable).count
            if usable == devices.count {
                status = .authorized
                reasons.append(Reason(.summary, "\(user.name) can use all \(devices.count) \(noun) device(s)"))
            } else if usable > 0 {
                status = .limited
                reasons.append(Reason(.summary,
                    "\(user.name) can use \(usable) of \(devices.count) \(noun) devices"))
            } else if Self.onlyThroughTheBroker(devices) {
                // gpsd gated to devaccessd: what the ledger and policy allow decides (the
                // location level, LedgerStatus.applyAccuracy), not what the user can open.
                status = .notDetermined
                reasons.append(Reason(.summary, "\(user.name) cannot reach \(noun) directly (the service is gated to "
                    + "devaccessd) and devaccessd serves it only with a grant"))
            } else if !inputs.ledgerAllows.isEmpty {
                // The ledger allows it but the nodes do not (a replug before reconcile, a
                // removed entry): the status says what the kernel does, the drift says why.
                status = .notDetermined
                reasons.append(Reason(.summary, "\(user.name) cannot open any \(noun) device now, although "
                    + "the ledger allows it; the ACL entries are missing (see drift; 'devaccess reconcile' restores them)"))
            } else if !inputs.programAllows.isEmpty {
                status = .notDetermined
                reasons.append(Reason(.summary, "\(user.name) cannot open any \(noun) device directly, only through "
                    + "'devaccess run' of " + inputs.programAllows.joined(separator: ", ")))
            } else {
                status = .notDetermined
                reasons.append(Reason(.summary,
                    "\(user.name) cannot open any \(noun) device and nothing has been decided"))
            }
        }
        reasons.append(contentsOf: nodeReasons)
        reasons.append(contentsOf: report.notes)
        return PermissionStatus(permission: report.permission, status: status, devices: devices,
                                reasons: reasons, drift: [])
    }

    static func deviceStatus(_ device: Device, _ user: UserIdentity) -> DeviceStatus {
        let nodes = device.nodes.map { node in
            NodeStatus(node: node, evaluation: node.facts.map { AccessEvaluator.evaluate($0, for: user) })
        }
        let usable: Bool
        switch device.route {
        case .nodes:
            usable = !nodes.isEmpty && nodes.allSatisfy(\.sufficient)
        case .service(let service):
            // A node the user can open (a receiver's serial port) is a way around a gate.
            usable = service.openToAllLocalUsers || nodes.contains(where: \.sufficient)
        }
        return DeviceStatus(device: device, nodes: nodes, usable: usable)
    }

    /// True when every device is a service gated to devaccessd that the user cannot reach
    /// around the gate: then only devaccessd gives it, at what the ledger and policy allow.
    public static func onlyThroughTheBroker(_ devices: [DeviceStatus]) -> Bool {
        !devices.isEmpty && devices.allSatisfy { device in
            guard case .service(let service) = device.device.route else { return false }
            return !service.openToAllLocalUsers && !device.usable
        }
    }

    static func accessReasons(_ device: DeviceStatus, _ user: UserIdentity) -> [Reason] {
        var reasons: [Reason] = []
        if case .service(let service) = device.device.route {
            reasons.append(Reason(.service, service.openToAllLocalUsers
                ? "\(service.name) at \(service.endpoint) accepts any local program: access to it is not gated "
                    + "(config/nftables/devaccess-gpsd.nft gates it to devaccessd)"
                : "\(service.name) at \(service.endpoint) is gated: only devaccessd reaches it, and it serves "
                    + "\(user.name) at their grant"))
            for node in device.nodes where node.sufficient && !service.openToAllLocalUsers {
                reasons.append(Reason(.access, "\(node.node.path) is a way around the gate: \(user.name) can read "
                    + "the receiver directly"))
            }
        }
        for node in device.nodes {
            switch node.node.state {
            case .unusable(let why):
                reasons.append(Reason(.access, "\(node.node.path): \(why)"))
            case .present(let facts):
                guard let evaluation = node.evaluation else { continue }
                reasons.append(Reason(.access, AccessExplanation.sentence(
                    facts: facts, required: node.node.required, result: evaluation, user: user)))
            }
        }
        return reasons
    }
}

/// Turns an evaluation into a sentence that names the rule that applied.
public enum AccessExplanation {
    public static func sentence(facts: NodeFacts, required: AccessMode, result: AccessEvaluator.Result,
                                user: UserIdentity) -> String {
        let owner = facts.ownerName ?? String(facts.ownerUID)
        let group = facts.groupName ?? String(facts.groupGID)
        let head = "\(facts.path) (\(owner):\(group) \(facts.modeOctal)\(facts.acl == nil ? "" : " +acl")): "
        let verdict = result.access.isSuperset(of: required)
            ? "\(user.name) can open it \(result.access.word)"
            : "\(user.name) has \(result.access.word), needs \(required.word)"
        var why = rule(result.decidedBy, facts: facts, user: user)
        if !result.maskedOut.isEmpty {
            why += "; the ACL mask removes \(result.maskedOut.symbolic)"
        }
        if result.readWriteOnlySeparately {
            let writer = rule(AccessEvaluator.source(of: .write, on: facts, for: user), facts: facts, user: user)
            why += "; it can also open it write-only (\(writer)), but a read-write open is refused: "
                + "the kernel needs one entry that grants both"
        }
        return head + verdict + " (" + why + ")"
    }

    /// The rule that applied, in words.
    static func rule(_ source: AccessEvaluator.Source, facts: NodeFacts, user: UserIdentity) -> String {
        switch source {
        case .superuser:
            return "root bypasses file permissions (CAP_DAC_OVERRIDE)"
        case .owner:
            return "\(user.name) owns the node"
        case .namedUser:
            let entry = facts.acl?.first { if case .user(let uid) = $0.tag { uid == user.uid } else { false } }
            return "ACL entry \(entry?.text ?? "user:\(user.name)")"
        case .groupClass(let gids):
            let names = gids.map { gid in
                "'" + (user.groupName(gid) ?? (gid == facts.groupGID ? facts.groupName : nil) ?? String(gid)) + "'"
            }
            return "member of group \(names.joined(separator: ", "))"
        case .other:
            return "not the owner and in no group with an entry, so the 'other' bits apply"
        }
    }
}
