import Testing
import DevAccessCore

/// The environment as a value: built from `environ`'s entries as main reads them, never
/// from this test process's own variables.
struct ProcessEnvironmentTests {
    @Test func entriesAreSplitAtTheFirstEqualsAndTheFirstOfANameWins() {
        let environment = ProcessEnvironment(entries: ["PATH=/bin:/usr/bin", "A=b=c", "EMPTY=", "NOEQUALS",
                                                       "PATH=/second"])
        #expect(environment["PATH"] == "/bin:/usr/bin", "glibc's getenv finds the first")
        #expect(environment["A"] == "b=c")
        #expect(environment["EMPTY"] == "")
        #expect(environment["NOEQUALS"] == nil)
        #expect(environment.nonEmpty("EMPTY") == nil)
        #expect(ProcessEnvironment(entries: []) == ProcessEnvironment())
    }

    @Test func theProjectsVariablesHaveTypedAccessors() {
        let set: ProcessEnvironment = ["DEVACCESS_STATE_DIR": "/s", "DEVACCESS_CONFIG_DIR": "/c",
                                       "DEVACCESS_SOCKET": "/run/x.sock", "DEVACCESS_GPSD": "[::1]:3000",
                                       "DEVACCESSD_STATUS_CACHE": "off"]
        #expect(set.stateDirectory == "/s")
        #expect(set.configDirectory == "/c")
        #expect(set.socketPath == "/run/x.sock")
        #expect(set.gpsd == "[::1]:3000")
        #expect(!set.keepsStatusInputs)
        // Set but empty counts as unset for the directories and the socket, as before.
        let empty: ProcessEnvironment = ["DEVACCESS_STATE_DIR": "", "DEVACCESS_CONFIG_DIR": "", "DEVACCESS_SOCKET": ""]
        #expect(empty.stateDirectory == nil && empty.configDirectory == nil && empty.socketPath == nil)
        #expect(ProcessEnvironment().keepsStatusInputs)
        #expect(ProcessEnvironment(["DEVACCESSD_STATUS_CACHE": "on"]).keepsStatusInputs)
    }
}
