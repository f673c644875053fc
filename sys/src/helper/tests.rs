use super::*;

fn sh(script: &str) -> Command {
    let mut c = Command::new("/bin/sh");
    c.args(["-c", script]);
    c
}

#[test]
fn input_goes_in_and_both_outputs_come_back() {
    let out = run(
        &mut sh("cat; echo oops >&2; exit 3"),
        b"hello",
        Duration::from_secs(30),
    )
    .unwrap();
    assert_eq!(out.stdout, b"hello");
    assert_eq!(out.stderr, b"oops\n");
    assert_eq!(out.status.code(), Some(3));
    assert!(!out.timed_out);
}

#[test]
fn input_larger_than_a_pipe_and_output_larger_than_a_pipe_do_not_deadlock() {
    // cat writes back while it is still being fed: both pipes fill unless
    // they are served together.
    let input = vec![b'x'; 1 << 20];
    let out = run(&mut sh("cat"), &input, Duration::from_secs(60)).unwrap();
    assert_eq!(out.stdout.len(), input.len());
    assert!(out.status.success());
}

#[test]
fn a_helper_past_its_deadline_is_killed_and_reaped() {
    let out = run(
        &mut sh("echo started; exec sleep 1000"),
        b"",
        Duration::from_millis(300),
    )
    .unwrap();
    assert!(out.timed_out);
    assert_eq!(out.stdout, b"started\n");
    use std::os::unix::process::ExitStatusExt;
    assert_eq!(out.status.signal(), Some(libc::SIGKILL));
}

#[test]
fn a_helper_that_ignores_its_input_is_not_waited_for() {
    let input = vec![b'x'; 1 << 20];
    let out = run(
        &mut sh("exec 0<&-; echo done"),
        &input,
        Duration::from_secs(30),
    )
    .unwrap();
    assert_eq!(out.stdout, b"done\n");
    assert!(out.status.success() && !out.timed_out);
}

#[test]
fn a_missing_program_is_an_error() {
    let e = run(
        &mut Command::new("/nonexistent/rund"),
        b"",
        Duration::from_secs(1),
    )
    .unwrap_err();
    assert_eq!(e.kind(), io::ErrorKind::NotFound);
}
