import DevAccessCore
import DevAccessInterface

// The wire form of `run` and its replies (the values: DevAccessInterface, Values/Run.swift).
enum RunCoding {
    static func encode(_ order: RunOrder) -> [JSONMember] {
        var members = [
            JSONMember("program", .string(order.program)),
            JSONMember("arguments", .array(order.arguments.map { .string($0) })),
            JSONMember("environment", .array(order.environment.map { .string($0) })),
            JSONMember("directory", .string(order.directory)),
            JSONMember("umask", .integer(Int64(order.umask))),
            JSONMember("permissions", .array(order.permissions.map { .string($0.rawValue) })),
        ]
        if let reason = order.reason { members.append(JSONMember("reason", .string(reason))) }
        members += ConversationCoding.encode(scope: order.scope)
        if order.strict { members.append(JSONMember("strict", .bool(true))) }
        if let accuracy = order.accuracy { members.append(JSONMember("accuracy", .string(accuracy.rawValue))) }
        return members
    }

    static func decodeOrder(_ reader: inout ObjectReader) throws(ProtocolError) -> RunOrder {
        let program = try reader.string("program", maxLength: 4096)
        guard program.hasPrefix("/") else {
            throw ProtocolError(.badMessage, context: reader.childPath("program"),
                                reason: "the program is an absolute path (the client resolves it)")
        }
        let arguments = try reader.array("arguments", maxCount: RunOrder.maxArguments) {
            (value, path) throws(ProtocolError) in try Strict.string(value, path: path, maxLength: 65536)
        }
        guard !arguments.isEmpty else {
            throw ProtocolError(.badMessage, context: reader.childPath("arguments"),
                                reason: "argv needs at least argv[0]")
        }
        let environment = try reader.array("environment", maxCount: RunOrder.maxEnvironment) {
            (value, path) throws(ProtocolError) in try Strict.string(value, path: path, maxLength: 65536)
        }
        let directory = try reader.string("directory", maxLength: 4096)
        let umask = UInt32(try reader.integer("umask", in: 0...0o777))
        // Empty: the permissions the policy's [Program] section declares for the program.
        let listed = try reader.required("permissions")
        let permissions = listed == .array([]) ? [] : try Strict.permissions(listed, path: "$.permissions")
        let reason = try reader.optionalString("reason", maxLength: 1024)
        let scope = reader.has("scope") ? try ConversationCoding.scope(&reader) : nil
        let strict = try reader.optional("strict").map { (value) throws(ProtocolError) in
            try Strict.bool(value, path: "$.strict")
        } ?? false
        let accuracy = try ConversationCoding.accuracy(&reader)
        if accuracy != nil && !permissions.isEmpty && !permissions.contains(.location) {
            throw ProtocolError(.badMessage, context: reader.childPath("accuracy"),
                                reason: "'accuracy' goes only with permission location, which is not asked for")
        }
        for (index, text) in (arguments + environment + [program, directory]).enumerated() where text.utf8.contains(0) {
            throw ProtocolError(.badMessage, context: "$", reason: "string \(index) holds a NUL byte")
        }
        return RunOrder(program: program, arguments: arguments, environment: environment, directory: directory,
                        umask: umask, permissions: permissions, reason: reason, scope: scope, strict: strict,
                        accuracy: accuracy)
    }

    static func encode(_ started: RunStartedReply) -> [JSONMember] {
        [JSONMember("run", .integer(started.run)), JSONMember("pid", .integer(Int64(started.pid))),
         JSONMember("gid", .integer(Int64(started.gid))),
         JSONMember("results", .array(started.results.map(ConversationCoding.encode))),
         JSONMember("removed_environment", .array(started.removedEnvironment.map { .string($0) }))]
    }

    static func decodeStarted(_ reader: inout ObjectReader) throws(ProtocolError) -> RunStartedReply {
        RunStartedReply(run: try reader.integer("run", in: 1...Int64.max), pid: try reader.int32("pid"),
                        gid: try reader.uint32("gid"),
                        results: try reader.array("results", maxCount: 64, ConversationCoding.decodeResult),
                        removedEnvironment: try reader.array("removed_environment", maxCount: RunOrder.maxEnvironment) {
                            (value, path) throws(ProtocolError) in try Strict.string(value, path: path, maxLength: 65536)
                        })
    }

    static func encode(_ ended: RunEndedReply) -> [JSONMember] {
        var members = [JSONMember("run", .integer(ended.run))]
        switch ended.exit {
        case .exited(let code): members.append(JSONMember("exit_code", .integer(Int64(code))))
        case .signaled(let signal, let core):
            members.append(JSONMember("signal", .integer(Int64(signal))))
            if core { members.append(JSONMember("core_dumped", .bool(true))) }
        }
        return members
    }

    static func decodeEnded(_ reader: inout ObjectReader) throws(ProtocolError) -> RunEndedReply {
        let run = try reader.integer("run", in: 1...Int64.max)
        if reader.has("exit_code") {
            return RunEndedReply(run: run, exit: .exited(Int32(try reader.integer("exit_code", in: 0...255))))
        }
        let signal = Int32(try reader.integer("signal", in: 1...64))
        let core = try reader.optional("core_dumped").map { (value) throws(ProtocolError) in
            try Strict.bool(value, path: "$.core_dumped")
        } ?? false
        return RunEndedReply(run: run, exit: .signaled(signal, coreDumped: core))
    }
}
