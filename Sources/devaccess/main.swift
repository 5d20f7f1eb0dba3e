import DevAccessCLI
import Glibc

exit(await DevAccessCLI.main(Array(CommandLine.arguments.dropFirst())))
