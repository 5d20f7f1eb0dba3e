import Testing
import Foundation
import DevAccessTestSupport
@testable import DevAccessCLI

/// `devaccess completion bash|zsh|fish`, loaded into the real shells: the scripts parse,
/// register, and complete commands, options, permissions and option values from the one
/// command table.
@Suite struct CompletionTests {
    static func script(_ shell: String) throws -> String {
        let result = try TestProcess.devaccess(["completion", shell])
        try #require(result.status == 0, "\(result.stderr)")
        let path = NSTemporaryDirectory() + "devaccess-completion-\(getpid())-\(shell)"
        try result.stdout.write(toFile: path, atomically: true, encoding: .utf8)
        return path
    }

    static let directory = URL(fileURLWithPath: TestProcess.devaccessBinary).deletingLastPathComponent().path

    /// What bash's completion function offers for each partial command line.
    @Test func bashCompletesFromTheCommandTable() throws {
        let path = try Self.script("bash")
        defer { unlink(path) }
        let lines = ["devaccess st", "devaccess request loc", "devaccess grant location --accuracy c",
                     "devaccess grant --us", "devaccess audit --format c", "devaccess switch camera o",
                     "devaccess location --accuracy ne", "devaccess completion "]
        let result = try TestProcess.run("/bin/bash", ["-c", """
            source "$1" || exit 3
            complete -p devaccess || exit 4
            shift
            for line in "$@"; do
              read -ra COMP_WORDS <<< "$line"
              [[ $line == *" " ]] && COMP_WORDS+=("")
              COMP_CWORD=$((${#COMP_WORDS[@]} - 1))
              COMPREPLY=()
              _devaccess
              echo "${COMPREPLY[*]}"
            done
            """, "bash", path] + lines)
        #expect(result.status == 0, "\(result.stderr)")
        let replies = result.stdout.split(separator: "\n", omittingEmptySubsequences: false).map(String.init)
        try #require(replies.count >= lines.count + 1, "\(result.stdout)")
        #expect(replies[0] == "complete -F _devaccess devaccess")
        #expect(Array(replies[1...lines.count]) == ["status", "location", "city country", "--user", "csv", "on off",
                                                   "neighborhood", ""], "\(result.stdout)")
    }

    /// A device id is what gpsd's port said a receiver's path was, and anyone may listen
    /// there: the bash script must offer such a word as text, never expand it (compgen -W
    /// would run `$(...)` in it as whoever pressed TAB, root included). The `devaccess`
    /// the script calls here is a shell function printing the attacker's ids.
    @Test func bashNeverExpandsTheWordsItIsGiven() throws {
        let path = try Self.script("bash")
        defer { unlink(path) }
        let marks = NSTemporaryDirectory() + "devaccess-completion-marks-\(getpid())"
        try FileManager.default.createDirectory(atPath: marks, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(atPath: marks) }
        let result = try TestProcess.run("/bin/bash", ["-c", """
            source "$1" || exit 3
            marks=$2
            devaccess() {
              printf '%s\\n' 'location:gpsd:$(touch${IFS}'"$marks"'/ran)' 'location:gpsd:`touch '"$marks"'/ran2`' 'location:gpsd:/dev/ttyACM0'
            }
            for line in "devaccess deny camera --device loc" "devaccess approve "; do
              read -ra COMP_WORDS <<< "$line"
              [[ $line == *" " ]] && COMP_WORDS+=("")
              COMP_CWORD=$((${#COMP_WORDS[@]} - 1))
              COMPREPLY=()
              _devaccess
              printf '%s|' "${COMPREPLY[@]}"; echo
            done
            """, "bash", path, marks])
        #expect(result.status == 0, "\(result.stderr)")
        #expect(!FileManager.default.fileExists(atPath: marks + "/ran") && !FileManager.default.fileExists(atPath: marks + "/ran2"),
                "a word was run as a command")
        let lines = result.stdout.split(separator: "\n").map(String.init)
        try #require(lines.count == 2, "\(result.stdout)")
        #expect(lines[0].contains("location:gpsd:/dev/ttyACM0|") && lines[0].contains("location:gpsd:$(touch${IFS}"),
                "the words are offered as they are: \(lines[0])")
    }

    /// What `completion --words devices` may print: nothing a shell would expand or split.
    @Test func onlyPlainWordsAreListed() {
        for word in ["camera:pci-0000:00:14.0-usb-0:1:1.0", "location:gpsd:/dev/ttyACM0", "microphone:card1/pcmC1D0c"] {
            #expect(CompletionCommand.isPlainWord(word), "\(word)")
        }
        for word in ["", "location:gpsd:$(id)", "a b", "a\nb", "x`id`", "x;id", "x'y", "x\"y", "x*", "x?", "x$y", "é"] {
            #expect(!CompletionCommand.isPlainWord(word), "\(word)")
        }
    }

    /// fish's own completer (`complete -C`) with the script loaded.
    @Test(.enabled(if: FileManager.default.isExecutableFile(atPath: "/usr/bin/fish"), "fish is not installed"))
    func fishCompletesFromTheCommandTable() throws {
        let path = try Self.script("fish")
        defer { unlink(path) }
        let result = try TestProcess.run("/usr/bin/fish", ["-c", """
            source $argv[1]; or exit 3
            for line in $argv[2..-1]
                echo (complete -C "$line" | string replace -r '\\t.*' '' | string join ' ')
            end
            """, path, "devaccess st", "devaccess request loc", "devaccess grant location --accuracy c",
            "devaccess switch camera o"])
        #expect(result.status == 0, "\(result.stderr)")
        #expect(result.stdout.split(separator: "\n").map(String.init)
                == ["status", "location", "city country", "off on"], "\(result.stdout)")
    }

    /// zsh: the script parses, compinit registers it for devaccess, and, called as the
    /// completion system calls it (with _describe and _arguments standing in, printing what
    /// they are given), it offers the commands at the first word and each command's options
    /// and arguments after it. (Driving zsh's line editor itself needs a pty.)
    @Test(.enabled(if: FileManager.default.isExecutableFile(atPath: "/usr/bin/zsh"), "zsh is not installed"))
    func zshRegistersAndOffersTheCommandTable() throws {
        let path = try Self.script("zsh")
        defer { unlink(path) }
        let dump = NSTemporaryDirectory() + "devaccess-zcompdump-\(getpid())"
        defer { unlink(dump) }
        let result = try TestProcess.run("/usr/bin/zsh", ["-fc", """
            zsh -n "$1" || exit 3
            autoload -U compinit && compinit -u -d "$2" || exit 4
            source "$1" || exit 5
            print -r -- "registered: $_comps[devaccess]"
            _describe() { print -rl -- ${(P)${@[-1]}} }
            _arguments() { print -rl -- "$@" }
            words=(devaccess ""); CURRENT=2; _devaccess
            words=(devaccess grant location --accuracy ""); CURRENT=5; _devaccess
            """, "zsh", path, dump])
        #expect(result.status == 0, "\(result.stderr)")
        let lines = result.stdout.split(separator: "\n").map(String.init)
        #expect(lines.first == "registered: _devaccess", "\(result.stdout)")
        #expect(lines.contains { $0.hasPrefix("status:Show the status") } && lines.contains { $0.hasPrefix("completion:") },
                "\(result.stdout)")
        #expect(lines.contains { $0.hasPrefix("--accuracy[") && $0.hasSuffix(":(exact street neighborhood city country)") }
                    && lines.contains { $0.hasPrefix("--user[") && $0.hasSuffix(":_users") }
                    && lines.contains("*:argument:(camera microphone location)"), "\(result.stdout)")
    }

    @Test func aShellItDoesNotKnowIsAUsageError() throws {
        let result = try TestProcess.devaccess(["completion", "tcsh"])
        #expect(result.status == 64 && result.stderr.contains("bash, zsh or fish"), "\(result.stderr)")
    }
}
