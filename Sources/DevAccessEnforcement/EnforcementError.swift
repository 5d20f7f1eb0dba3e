import DevAccessCore
import DevAccessLedger

/// Why an engine operation did not run. Nothing was written when one of these is thrown
/// before the ledger changed (unknown device); ledger failures carry the ledger's own case.
public enum EnforcementError: Error, Sendable, Hashable, CustomStringConvertible {
    case ledger(LedgerError)
    /// `--device ID` names no device of the permission that exists now.
    case unknownDevice(id: String, permission: Permission, known: [String], unavailable: String?)
    /// The policy forbids the permission to the user (the sentence names the rule): a grant
    /// would be ended by the next run.
    case policyForbids(String)
    /// A revoke, denial or reset whose entries were removed but which the ledger could not
    /// record (`UnrecordedEndings`): the access ended, the record is still to be written.
    case endedUnrecorded(UnrecordedEndings.Ending, LedgerError)
    /// The policy in force does not parse, so what it allows or caps is unknown (fail closed).
    case policyUnreadable(String)

    public var description: String {
        switch self {
        case .ledger(let error):
            return error.description
        case .policyUnreadable(let problem):
            return "the policy cannot be read, so nothing it governs is given: \(problem); fix the file "
                + "('devaccess policy check' shows where)"
        case .policyForbids(let why):
            return "\(why); a grant would be ended by policy at once: change the policy first "
                + "('devaccess policy check' shows it)"
        case .endedUnrecorded(let ending, let failure):
            let what: String
            switch ending {
            case .revoke(let permission, let subject, _, _): what = "\(subject.name)'s \(permission.rawValue) grants"
            case .deny(let request): what = "\(request.subject.name)'s \(request.permission.rawValue) access (denied)"
            case .reset(let subject, let permission):
                what = "\(subject.name)'s \(permission?.rawValue ?? "device") decisions (reset)"
            }
            return "\(what): the access was removed from the device nodes, but the ledger could not record it: "
                + "\(failure.description). The engine records it at its next runs once the ledger can be written "
                + "(devaccessd retries until then); run the command again to be sure it is recorded"
        case .unknownDevice(let id, let permission, let known, let unavailable):
            var text = "no \(permission.rawValue) device with id '\(id)'"
            if !known.isEmpty {
                text += "; devices now: " + known.joined(separator: ", ")
            } else if let unavailable {
                text += " (\(unavailable))"
            } else {
                text += " (no \(permission.rawValue) device is present)"
            }
            return text + "; see 'devaccess devices'"
        }
    }
}

extension EnforcementError {
    /// Runs ledger work, its failure as an engine failure (for callers that work on the
    /// engine's ledger beside the engine's own operations).
    public static func ledgerWork<R>(_ body: () throws(LedgerError) -> R) throws(EnforcementError) -> R {
        do {
            return try body()
        } catch {
            throw .ledger(error)
        }
    }
}
