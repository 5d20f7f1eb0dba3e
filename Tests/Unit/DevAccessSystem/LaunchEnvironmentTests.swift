import DevAccessSystem
import Testing
import DevAccessLaunch

/// What `devaccess run` keeps of the caller's environment (the real launch is in
/// ProgramLauncherTests.aCleanedEnvironmentReachesTheProgramWithoutLoaderVariables).
struct LaunchEnvironmentTests {
    /// The variables the keep list names stay; code-loading ones, and every name it does not
    /// list (issue 27: only listed variables are kept, as sudo's env_keep), go.
    @Test func codeLoadingVariablesGoOrdinaryOnesStay() {
        let ordinary = ["HOME=/home/x", "TERM=xterm", "LANG=de_DE.UTF-8", "LC_ALL=C", "DISPLAY=:0",
                        "WAYLAND_DISPLAY=wayland-0", "XDG_RUNTIME_DIR=/run/user/1000", "PATH=/usr/bin:/bin",
                        "TMPDIR=/tmp/user/1000", "TZ=Europe/Berlin"]
        let unlisted = ["LIBV4LCONTROL_FLAGS=1", "SHELL=/bin/bash", "PERL_UNICODE=SDA", "GST_DEBUG=3", "LD=ld.gold"]
        let injected = ["LD_PRELOAD=/tmp/evil.so", "LD_LIBRARY_PATH=/tmp", "LD_AUDIT=/tmp/a.so", "GCONV_PATH=/tmp",
                        "GLIBC_TUNABLES=glibc.malloc.check=3", "MALLOC_CHECK_=3", "LOCPATH=/tmp", "NLSPATH=/tmp/%N",
                        "HOSTALIASES=/tmp/h", "RES_OPTIONS=debug", "TZDIR=/tmp", "BASH_ENV=/tmp/rc", "ENV=/tmp/rc",
                        "SHELLOPTS=xtrace", "PS4=$(id)", "IFS=/", "BASH_FUNC_ls%%=() { id; }",
                        "PYTHONPATH=/tmp", "PYTHONSTARTUP=/tmp/s.py", "PYTHONPYCACHEPREFIX=/tmp", "PERL5LIB=/tmp",
                        "PERL5OPT=-Mevil", "RUBYOPT=-revil", "NODE_OPTIONS=--require /tmp/e.js",
                        "JAVA_TOOL_OPTIONS=-javaagent:/tmp/a.jar", "_JAVA_OPTIONS=-Dx", "GST_PLUGIN_PATH=/tmp",
                        "GST_PLUGIN_PATH_1_0=/tmp", "GST_PLUGIN_SYSTEM_PATH_1_0=/tmp", "GST_PLUGIN_SCANNER=/tmp/s",
                        "GST_REGISTRY_1_0=/tmp/r.bin", "GIO_EXTRA_MODULES=/tmp", "GTK_MODULES=evil", "GTK_PATH=/tmp",
                        "QT_PLUGIN_PATH=/tmp", "QT_QPA_PLATFORM_PLUGIN_PATH=/tmp", "SPA_PLUGIN_DIR=/tmp",
                        "ALSA_CONFIG_PATH=/tmp/asound.conf", "LIBVA_DRIVERS_PATH=/tmp", "VK_LAYER_PATH=/tmp",
                        "OPENSSL_CONF=/tmp/o.cnf"]
        let (kept, removed) = LaunchEnvironment.clean(injected + ordinary + unlisted, uid: 1000)
        #expect(kept == ordinary)
        #expect(removed == (injected + unlisted).map { String($0.prefix { $0 != "=" }) })
    }

    /// The loaders the drop list missed (hostile review 3): libasound's, libglvnd's vendor
    /// name (a name with '/' is dlopen'ed as a path), GObject introspection's typelib path.
    @Test func loadersNoListNamedGo() {
        let loaders = ["ALSA_PLUGIN_DIR=/tmp/p", "ALSA_MIXER_SIMPLE_MODULES=/tmp/m", "ALSA_CONFIG_UCM2=/tmp/u",
                       "__GLX_VENDOR_LIBRARY_NAME=../../tmp/evil", "GI_TYPELIB_PATH=/tmp/t"]
        let (kept, removed) = LaunchEnvironment.clean(loaders + ["HOME=/home/x"], uid: 1000)
        #expect(kept == ["HOME=/home/x"])
        #expect(removed == loaders.map { String($0.prefix { $0 != "=" }) })
    }

    /// The session bus only as a socket under the user's own runtime directory: `unixexec:`
    /// runs a program, and another path may be anyone's socket.
    @Test func theBusAddressIsKeptOnlyAsASocketInTheUsersRuntimeDirectory() {
        for (value, keep) in [("unix:path=/run/user/1000/bus", true), ("unixexec:path=/tmp/evil", false),
                              ("unix:path=/run/user/1001/bus", false), ("unix:path=/run/user/1000/../1001/bus", false),
                              ("unix:path=/tmp/bus", false), ("unix:abstract=/tmp/x", false),
                              ("unix:path=/run/user/1000/bus;unixexec:path=/tmp/evil", false),
                              ("unix:path=/run/user/1000/", false), ("tcp:host=localhost,port=1", false)] {
            let (kept, removed) = LaunchEnvironment.clean(["DBUS_SESSION_BUS_ADDRESS=" + value], uid: 1000)
            #expect(kept == (keep ? ["DBUS_SESSION_BUS_ADDRESS=" + value] : []), "\(value)")
            #expect(removed == (keep ? [] : ["DBUS_SESSION_BUS_ADDRESS"]), "\(value)")
        }
    }

    /// A locale is a name: with a '/' glibc loads it from that path.
    @Test func aLocaleThatIsAPathGoes() {
        let (kept, removed) = LaunchEnvironment.clean(["LANG=/tmp/evil", "LC_ALL=../tmp", "LANGUAGE=de:en",
                                                       "LC_TIME=C.UTF-8"], uid: 1000)
        #expect(kept == ["LANGUAGE=de:en", "LC_TIME=C.UTF-8"])
        #expect(removed == ["LANG", "LC_ALL"])
    }

    @Test func entriesWithoutANameOrEqualsAndRepeatsGo() {
        let (kept, removed) = LaunchEnvironment.clean(["HOME=/first", "NOEQUALS", "=value", "HOME=/second",
                                                       "LD_PRELOAD=/a", "LD_PRELOAD=/b", "TERM=", "TERM=again"],
                                                      uid: 1000)
        #expect(kept == ["HOME=/first", "TERM="])
        #expect(removed == ["NOEQUALS", "=value", "HOME", "LD_PRELOAD", "TERM"])
    }

    /// Compared as bytes, as libc does: a combining mark after a listed name must not pass as
    /// that name, nor hide a name that goes.
    @Test func namesCompareAsBytes() {
        let (kept, removed) = LaunchEnvironment.clean(["LD_PRELOAD=\u{301}/tmp/evil.so", "BASH_FUNC_\u{301}x%%=() { id; }",
                                                       "HOME\u{301}=1", "HOME=2"], uid: 1000)
        #expect(kept == ["HOME=2"])
        #expect(removed == ["LD_PRELOAD", "BASH_FUNC_\u{301}x%%", "HOME\u{301}"])
    }
}
