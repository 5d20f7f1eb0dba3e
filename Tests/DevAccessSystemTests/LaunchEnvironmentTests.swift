import DevAccessSystem
import Testing
import DevAccessLaunch

/// What `devaccess run` keeps of the caller's environment (the real launch is in
/// ProgramLauncherTests.aCleanedEnvironmentReachesTheProgramWithoutLoaderVariables).
struct LaunchEnvironmentTests {
    @Test func codeLoadingVariablesGoOrdinaryOnesStay() {
        let ordinary = ["HOME=/home/x", "TERM=xterm", "LANG=de_DE.UTF-8", "LC_ALL=C", "DISPLAY=:0",
                        "WAYLAND_DISPLAY=wayland-0", "XDG_RUNTIME_DIR=/run/user/1000", "PATH=/usr/bin:/bin",
                        "TMPDIR=/tmp/user/1000", "TZ=Europe/Berlin", "LIBV4LCONTROL_FLAGS=1", "SHELL=/bin/bash",
                        "PERL_UNICODE=SDA", "GST_DEBUG=3", "LD=ld.gold"]
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
        let (kept, removed) = LaunchEnvironment.clean(injected + ordinary)
        #expect(kept == ordinary)
        #expect(removed == injected.map { String($0.prefix { $0 != "=" }) })
    }

    @Test func entriesWithoutANameOrEqualsAndRepeatsGo() {
        let (kept, removed) = LaunchEnvironment.clean(["HOME=/first", "NOEQUALS", "=value", "HOME=/second",
                                                       "LD_PRELOAD=/a", "LD_PRELOAD=/b", "A=", "A=again"])
        #expect(kept == ["HOME=/first", "A="])
        #expect(removed == ["NOEQUALS", "=value", "HOME", "LD_PRELOAD", "A"])
    }

    /// Compared as bytes, as libc does: a combining mark after '=' or '_' must not hide a name.
    @Test func namesCompareAsBytes() {
        let (kept, removed) = LaunchEnvironment.clean(["LD_PRELOAD=\u{301}/tmp/evil.so", "BASH_FUNC_\u{301}x%%=() { id; }",
                                                       "e\u{301}=1", "\u{e9}=2"])
        #expect(kept == ["e\u{301}=1", "\u{e9}=2"])
        #expect(removed == ["LD_PRELOAD", "BASH_FUNC_\u{301}x%%"])
    }
}
