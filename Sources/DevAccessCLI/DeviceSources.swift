import DevAccessArguments
import DevAccessCore
import DevAccessEnforcement
import DevAccessHardware
import Glibc

/// Where commands get their devices: udev and gpsd, or (DEBUG builds only) a test file.
enum DeviceSources {
    /// TEST-ONLY: in DEBUG builds `DEVACCESS_TEST_DEVICES=/path/devices.json` replaces udev
    /// and gpsd with declared devices (nodes the CLI tests made with mknod), so the tests can
    /// run the real binary against real nodes. Release builds ignore the variable.
    static func testSource(_ environment: ProcessEnvironment) throws -> DeclaredDeviceSource? {
        #if DEBUG
        guard let path = environment[ProcessEnvironment.Name.testDevices] else { return nil }
        do {
            return try DeclaredDeviceSource(contentsOf: path)
        } catch {
            throw CommandFailure(message: error.description)
        }
        #else
        return nil
        #endif
    }

    /// The device source the enforcement engine uses.
    static func source(_ arguments: ParsedArguments, command: String) throws -> any DeviceSource {
        if let declared = try testSource(arguments.environment) { return declared }
        return MachineDeviceSource(probeOptions: try CommonOptions.probeOptions(arguments, command: command))
    }

    /// Reports for `permissions`; location runs beside the udev probes (see `MachineProbe`).
    static func reports(_ permissions: [Permission], options: ProbeOptions,
                        environment: ProcessEnvironment) async throws -> [AdapterReport] {
        if let declared = try testSource(environment) { return permissions.map { declared.report(for: $0) } }
        return await MachineProbe.probe(permissions, options: options)
    }
}
