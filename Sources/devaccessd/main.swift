import DevAccessBroker
import DevAccessCore
import DevAccessSystem
import Glibc

// The environment is read here, once, and passed down (docs/environment.md).
exit(Daemon.main(Array(CommandLine.arguments.dropFirst()), environment: .current()))
