/// The environment `devaccess run` hands the program it starts.
///
/// `Program=` rules and prompts name the file devaccess executes; that name only says what
/// code runs if the caller's environment cannot make the program load other code. So the
/// variables below are dropped, the way sudo's env_reset and glibc's secure mode do: the
/// dynamic loader's, glibc's own list for setuid programs, interpreters' and shells' startup
/// code and module paths, and the plugin paths of the media and graphics stacks a camera or
/// microphone program loads. Everything else (HOME, TERM, LANG, DISPLAY, XDG_*, PATH, TZ,
/// TMPDIR, ...) is kept: the program runs as the caller, for the caller.
///
/// What this cannot stop: a program that loads code from the user's own files by design
/// (~/.local python packages, ~/.asoundrc `lib`, user GStreamer plugins), or a `#!/usr/bin/env`
/// script whose interpreter is found through the caller's PATH. docs/architecture.md
/// ("devaccess run: environment") keeps this list in prose.
public enum LaunchEnvironment {
    /// A name dropped exactly, or every name starting with a prefix.
    public enum Rule: Sendable, Hashable {
        case name(String)
        case prefix(String)

        /// Byte-wise, as libc and the loader compare (Swift's String == is Unicode equivalence).
        func matches(_ variable: ArraySlice<UInt8>) -> Bool {
            switch self {
            case .name(let name): return variable.elementsEqual(name.utf8)
            case .prefix(let prefix): return variable.starts(with: prefix.utf8)
            }
        }
    }

    /// The one list of dropped variables.
    public static let dropped: [Rule] = [
        // The dynamic loader: LD_PRELOAD, LD_LIBRARY_PATH, LD_AUDIT, ... all of them.
        .prefix("LD_"),
        // glibc's list for setuid programs (unsecvars.h), but TMPDIR (where temporary files go
        // is the caller's own choice; no code is loaded from it; pam_tmpdir sets it per user):
        // gconv modules and getconf helpers are code, tunables change the loader and malloc,
        // the rest redirect what libc parses (resolver, locales, catalogs, time zones).
        .name("GCONV_PATH"), .name("GETCONF_DIR"), .name("GLIBC_TUNABLES"), .name("HOSTALIASES"),
        .name("LOCALDOMAIN"), .name("LOCPATH"), .prefix("MALLOC_"), .name("NIS_PATH"), .name("NLSPATH"),
        .name("RESOLV_HOST_CONF"), .name("RES_OPTIONS"), .name("TZDIR"),
        // Shells: startup files, options, exported functions (BASH_FUNC_name%%), xtrace's PS4
        // (runs command substitutions), IFS.
        .name("BASH_ENV"), .name("ENV"), .name("SHELLOPTS"), .name("BASHOPTS"), .prefix("BASH_FUNC_"),
        .name("PS4"), .name("IFS"), .name("ZDOTDIR"), .name("FPATH"),
        // Interpreters: module paths, startup code, options that load modules. Every PYTHON*
        // (new ones keep arriving, several load code: PYTHONSTARTUP, PYTHONPYCACHEPREFIX,
        // PYTHONBREAKPOINT, PYTHONUSERBASE).
        .prefix("PYTHON"), .name("PERL5LIB"), .name("PERLLIB"), .name("PERL5OPT"), .name("PERL5DB"),
        .name("RUBYLIB"), .name("RUBYOPT"), .name("GEM_HOME"), .name("GEM_PATH"),
        .name("NODE_OPTIONS"), .name("NODE_PATH"), .name("JAVA_TOOL_OPTIONS"), .name("_JAVA_OPTIONS"),
        .name("JDK_JAVA_OPTIONS"), .name("CLASSPATH"), .prefix("LUA_PATH"), .prefix("LUA_CPATH"),
        .prefix("LUA_INIT"), .name("TCLLIBPATH"),
        // Media stacks: GStreamer plugins, scanner and registry (which names plugin files),
        // PipeWire/SPA modules, ALSA configuration (it can load plugin libraries).
        .prefix("GST_PLUGIN_"), .prefix("GST_REGISTRY"), .name("SPA_PLUGIN_DIR"), .name("PIPEWIRE_MODULE_DIR"),
        .name("ALSA_CONFIG_PATH"), .name("ALSA_CONFIG_DIR"),
        // GLib/GTK/Qt modules and loaders.
        .name("GIO_EXTRA_MODULES"), .name("GIO_MODULE_DIR"), .name("GTK_MODULES"), .name("GTK3_MODULES"),
        .name("GTK_PATH"), .name("GTK_EXE_PREFIX"), .name("GTK_IM_MODULE_FILE"), .name("GDK_PIXBUF_MODULE_FILE"),
        .name("GDK_PIXBUF_MODULEDIR"), .name("QT_PLUGIN_PATH"), .name("QT_QPA_PLATFORM_PLUGIN_PATH"),
        .name("QML_IMPORT_PATH"), .name("QML2_IMPORT_PATH"),
        // Graphics and video-acceleration drivers (shared libraries found through these).
        .name("LIBGL_DRIVERS_PATH"), .name("LIBVA_DRIVERS_PATH"), .name("VDPAU_DRIVER_PATH"),
        .name("__EGL_VENDOR_LIBRARY_DIRS"), .name("__EGL_VENDOR_LIBRARY_FILENAMES"), .name("GBM_BACKENDS_PATH"),
        .name("VK_ICD_FILENAMES"), .name("VK_DRIVER_FILES"), .name("VK_ADD_DRIVER_FILES"), .name("VK_LAYER_PATH"),
        .name("VK_ADD_LAYER_PATH"),
        // OpenSSL configuration, engines and providers (code).
        .name("OPENSSL_CONF"), .name("OPENSSL_ENGINES"), .name("OPENSSL_MODULES"),
    ]

    /// `env` without the dropped variables, entries without '=' (or with an empty name), and
    /// repeated names (the first is kept: glibc's getenv finds the first). `removed` names
    /// what went, in order, each name once, never a value (values may be secrets).
    public static func clean(_ env: [String]) -> (kept: [String], removed: [String]) {
        var kept: [String] = []
        var removed: [String] = []
        var seen = Set<ArraySlice<UInt8>>()
        var reported = Set<ArraySlice<UInt8>>()
        for entry in env {
            let bytes = Array(entry.utf8)[...]
            guard let equals = bytes.firstIndex(of: UInt8(ascii: "=")), equals != bytes.startIndex else {
                if reported.insert(bytes).inserted { removed.append(entry) }
                continue
            }
            let name = bytes[..<equals]
            let first = seen.insert(name).inserted
            if first && !dropped.contains(where: { $0.matches(name) }) {
                kept.append(entry)
            } else if reported.insert(name).inserted {
                removed.append(String(decoding: name, as: UTF8.self))
            }
        }
        return (kept, removed)
    }
}
