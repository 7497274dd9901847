//! Headless Chromium, for checking that the HTML reports render.
//!
//! Shared by the report corpus runner (`src/bin/report_corpus.rs`) and the
//! generator's own report test (`onnx-codegen/tests/report.rs`, which
//! includes this file by path so that it needs no extra dependency).

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// How long one browser run may take.
const TIMEOUT: Duration = Duration::from_secs(90);

/// How many times a run is tried when the browser itself dies by a signal.
/// A crash of the browser process (seen once in CI: SIGSEGV inside
/// Chromium, the same page rendering fine before and after) says nothing
/// about the page; an exit with an error status or a wrong page still fails
/// at once.
const ATTEMPTS: usize = 3;

/// Chromium's executable, if one is on the `PATH`.
pub fn chromium() -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .flat_map(|d| ["chromium", "chromium-browser", "google-chrome"].map(|n| d.join(n)))
        .find(|p| p.is_file())
}

/// Runs the browser headless with `args` and a fresh profile under
/// `profile`; its standard output, or an error that quotes the end of its
/// standard error.
pub fn run(exe: &Path, profile: &Path, args: &[String]) -> Result<String, String> {
    let mut last = String::new();
    for attempt in 1..=ATTEMPTS {
        let _ = std::fs::remove_dir_all(profile);
        match run_once(exe, profile, args) {
            Ok(out) => return Ok(out),
            Err(Failure::Crashed(e)) => {
                eprintln!("chromium crashed (attempt {attempt} of {ATTEMPTS}): {e}");
                last = e;
            }
            Err(Failure::Other(e)) => return Err(e),
        }
    }
    Err(format!("chromium crashed {ATTEMPTS} times; last: {last}"))
}

enum Failure {
    /// The browser process was killed by a signal.
    Crashed(String),
    Other(String),
}

fn run_once(exe: &Path, profile: &Path, args: &[String]) -> Result<String, Failure> {
    let spawn = || {
        Command::new(exe)
            .args([
                "--headless",
                "--no-sandbox",
                "--disable-gpu",
                "--disable-dev-shm-usage",
                "--no-first-run",
            ])
            .arg(format!("--user-data-dir={}", profile.display()))
            .args(args)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
    };
    // An executable just written can be "busy" for a moment: a process
    // forked meanwhile by another thread holds the writer's descriptor
    // until it execs (seen in CI with the tests' fake browsers).
    let mut tries = 0;
    let mut child = loop {
        match spawn() {
            Err(e) if e.kind() == std::io::ErrorKind::ExecutableFileBusy && tries < 50 => {
                tries += 1;
                std::thread::sleep(Duration::from_millis(20));
            }
            other => {
                break other
                    .map_err(|e| Failure::Other(format!("cannot start {}: {e}", exe.display())))?;
            }
        }
    };
    let reader = |pipe: Option<Box<dyn std::io::Read + Send>>| {
        std::thread::spawn(move || {
            let mut s = String::new();
            if let Some(mut p) = pipe {
                std::io::Read::read_to_string(&mut p, &mut s).ok();
            }
            s
        })
    };
    let stdout = reader(child.stdout.take().map(|p| Box::new(p) as _));
    let stderr = reader(child.stderr.take().map(|p| Box::new(p) as _));
    let deadline = Instant::now() + TIMEOUT;
    let status = loop {
        match child.try_wait() {
            Ok(Some(status)) => break status,
            Ok(None) if Instant::now() > deadline => {
                let _ = child.kill();
                let _ = child.wait();
                return Err(Failure::Other(format!(
                    "chromium did not finish within {} s",
                    TIMEOUT.as_secs()
                )));
            }
            Ok(None) => std::thread::sleep(Duration::from_millis(100)),
            Err(e) => return Err(Failure::Other(e.to_string())),
        }
    };
    let out = stdout.join().unwrap_or_default();
    let err = stderr.join().unwrap_or_default();
    if status.success() {
        return Ok(out);
    }
    let tail: Vec<&str> = err.lines().rev().take(6).collect::<Vec<_>>().into_iter().rev().collect();
    let message = format!("chromium failed: {status}\n{}", tail.join("\n"));
    if killed_by_signal(&status) {
        Err(Failure::Crashed(message))
    } else {
        Err(Failure::Other(message))
    }
}

#[cfg(unix)]
fn killed_by_signal(status: &std::process::ExitStatus) -> bool {
    std::os::unix::process::ExitStatusExt::signal(status).is_some()
}

#[cfg(not(unix))]
fn killed_by_signal(_: &std::process::ExitStatus) -> bool {
    false
}

#[cfg(all(test, unix))]
mod tests {
    use super::*;

    /// A stand-in browser: a shell script that kills itself with SIGSEGV
    /// until it has been started `crashes` times, then prints its arguments.
    fn fake(dir: &Path, crashes: usize) -> PathBuf {
        use std::os::unix::fs::PermissionsExt;
        let _ = std::fs::remove_dir_all(dir);
        std::fs::create_dir_all(dir).unwrap();
        let exe = dir.join("fake-chromium");
        let count = dir.join("count");
        let script = format!(
            "#!/bin/sh\nn=$(cat {c} 2>/dev/null || echo 0)\necho $((n+1)) > {c}\n\
             if [ \"$n\" -lt {crashes} ]; then echo 'about to crash' >&2; kill -SEGV $$; fi\n\
             echo \"$@\"\n",
            c = count.display()
        );
        std::fs::write(&exe, script).unwrap();
        std::fs::set_permissions(&exe, std::fs::Permissions::from_mode(0o755)).unwrap();
        exe
    }

    /// Held by each test for its whole run: a test writing its script
    /// while another forks to start one would leave a copy of the write
    /// descriptor in that child until it execs, and starting the script
    /// then fails with "Text file busy" (ETXTBSY).
    static ONE_AT_A_TIME: std::sync::Mutex<()> = std::sync::Mutex::new(());

    fn serial() -> std::sync::MutexGuard<'static, ()> {
        ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn scratch(name: &str) -> PathBuf {
        std::env::temp_dir().join(format!("onnx-codegen-browser-{}-{name}", std::process::id()))
    }

    #[test]
    fn a_crashing_browser_is_tried_again() {
        let _serial = serial();
        let dir = scratch("retry");
        let exe = fake(&dir, ATTEMPTS - 1);
        let out = run(&exe, &dir.join("profile"), &["--dump-dom".into()]).unwrap();
        assert!(out.contains("--dump-dom"), "{out}");
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn a_browser_that_always_crashes_fails_with_its_stderr() {
        let _serial = serial();
        let dir = scratch("always");
        let exe = fake(&dir, ATTEMPTS);
        let e = run(&exe, &dir.join("profile"), &[]).unwrap_err();
        assert!(e.contains("crashed 3 times") && e.contains("about to crash"), "{e}");
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn an_error_exit_is_not_retried() {
        let _serial = serial();
        let dir = scratch("exit");
        let exe = dir.join("fake-chromium");
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(&exe, "#!/bin/sh\necho 'bad page' >&2\nexit 3\n").unwrap();
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&exe, std::fs::Permissions::from_mode(0o755)).unwrap();
        let e = run(&exe, &dir.join("profile"), &[]).unwrap_err();
        assert!(e.starts_with("chromium failed") && e.contains("bad page"), "{e}");
        let _ = std::fs::remove_dir_all(&dir);
    }
}
