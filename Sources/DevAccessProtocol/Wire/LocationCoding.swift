import DevAccessCore
import DevAccessInterface

// The wire form of `location` (the value: DevAccessInterface, Values/Location.swift).
enum LocationCoding {
    static func encode(_ query: LocationQuery) -> [JSONMember] {
        var members: [JSONMember] = []
        if let accuracy = query.accuracy { members.append(JSONMember("accuracy", .string(accuracy.rawValue))) }
        members.append(JSONMember("wait", .integer(query.waitMilliseconds)))
        return members
    }

    static func decode(_ reader: inout ObjectReader) throws(ProtocolError) -> LocationQuery {
        var accuracy: LocationAccuracy?
        if let text = try reader.optionalString("accuracy", maxLength: 32) {
            do throws(LocationAccuracy.ParseError) {
                accuracy = try LocationAccuracy.parse(text)
            } catch {
                throw ProtocolError(.badMessage, context: reader.childPath("accuracy"), reason: error.description)
            }
        }
        let wait = try reader.optionalInteger("wait", in: 0...LocationQuery.maxWait) ?? LocationQuery.defaultWait
        return LocationQuery(accuracy: accuracy, waitMilliseconds: wait)
    }
}
