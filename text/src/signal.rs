//! Signals by name.

/// The standard signals of Linux on the architectures nodeipc runs on, by
/// number (`signal(7)`); the real-time ones are named from `SIGRTMIN`.
const NAMES: [(i32, &str); 31] = [
    (libc::SIGHUP, "SIGHUP"),
    (libc::SIGINT, "SIGINT"),
    (libc::SIGQUIT, "SIGQUIT"),
    (libc::SIGILL, "SIGILL"),
    (libc::SIGTRAP, "SIGTRAP"),
    (libc::SIGABRT, "SIGABRT"),
    (libc::SIGBUS, "SIGBUS"),
    (libc::SIGFPE, "SIGFPE"),
    (libc::SIGKILL, "SIGKILL"),
    (libc::SIGUSR1, "SIGUSR1"),
    (libc::SIGSEGV, "SIGSEGV"),
    (libc::SIGUSR2, "SIGUSR2"),
    (libc::SIGPIPE, "SIGPIPE"),
    (libc::SIGALRM, "SIGALRM"),
    (libc::SIGTERM, "SIGTERM"),
    (libc::SIGSTKFLT, "SIGSTKFLT"),
    (libc::SIGCHLD, "SIGCHLD"),
    (libc::SIGCONT, "SIGCONT"),
    (libc::SIGSTOP, "SIGSTOP"),
    (libc::SIGTSTP, "SIGTSTP"),
    (libc::SIGTTIN, "SIGTTIN"),
    (libc::SIGTTOU, "SIGTTOU"),
    (libc::SIGURG, "SIGURG"),
    (libc::SIGXCPU, "SIGXCPU"),
    (libc::SIGXFSZ, "SIGXFSZ"),
    (libc::SIGVTALRM, "SIGVTALRM"),
    (libc::SIGPROF, "SIGPROF"),
    (libc::SIGWINCH, "SIGWINCH"),
    (libc::SIGIO, "SIGIO"),
    (libc::SIGPWR, "SIGPWR"),
    (libc::SIGSYS, "SIGSYS"),
];

/// A signal's name as `kill -l` gives it with `SIG` before it: `SIGTERM`,
/// `SIGRTMIN`, `SIGRTMIN+3`, `SIGRTMAX`; a number that names no signal
/// (0, negative, past `SIGRTMAX`, or one glibc keeps for itself) is
/// `signal N`.
pub fn signal_name(number: i32) -> String {
    if let Some((_, name)) = NAMES.iter().find(|(n, _)| *n == number) {
        return (*name).to_owned();
    }
    let (min, max) = (libc::SIGRTMIN(), libc::SIGRTMAX());
    match number {
        n if n == min => "SIGRTMIN".to_owned(),
        n if n == max => "SIGRTMAX".to_owned(),
        n if n > min && n < max => format!("SIGRTMIN+{}", n - min),
        n => format!("signal {n}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_signal_has_its_name() {
        assert_eq!(signal_name(libc::SIGTERM), "SIGTERM");
        assert_eq!(signal_name(9), "SIGKILL");
        assert_eq!(signal_name(libc::SIGRTMIN()), "SIGRTMIN");
        assert_eq!(signal_name(libc::SIGRTMIN() + 3), "SIGRTMIN+3");
        assert_eq!(signal_name(libc::SIGRTMAX()), "SIGRTMAX");
        assert_eq!(signal_name(0), "signal 0");
        assert_eq!(signal_name(-1), "signal -1");
        assert_eq!(signal_name(libc::SIGRTMAX() + 1), "signal 65");
        // Kept by glibc for its threads: not a signal a program sends.
        assert_eq!(signal_name(32), "signal 32");
        for n in 1..32 {
            assert!(signal_name(n).starts_with("SIG"), "{n}");
        }
    }
}
