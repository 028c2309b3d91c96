//! Loading a hostile file: the one-line bad-input error it must end in, or
//! what went wrong instead.

/// Run `load` on its own thread: Ok with its one-line bad-input error, or
/// Err saying what went wrong instead (it loaded, panicked, hung for 60 s,
/// or its error is not one line of bad input).
pub fn refusal(
    load: impl FnOnce() -> normlab::Result<()> + Send + 'static,
) -> Result<String, String> {
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(load().map_err(|e| (e.is_bad_input(), e.to_string())));
    });
    // hang bound: 60 s (idle: 0.1 s, the slowest hostile load of the tests)
    match rx.recv_timeout(std::time::Duration::from_secs(60)) {
        Err(std::sync::mpsc::RecvTimeoutError::Timeout) => Err("the load hangs".into()),
        Err(_) => Err("the load panics".into()),
        Ok(Ok(())) => Err("it loads".into()),
        Ok(Err((true, e))) if !e.contains('\n') => Ok(e),
        Ok(Err((_, e))) => Err(format!("not one line of bad input: {e}")),
    }
}

/// Judge one hostile case: `outcome` (from [`refusal`]) must be a refusal
/// whose message, the folder's own path `dir` taken out, holds every word
/// of `words`. Prints the message; pushes what went wrong to `failed`.
pub fn judge(
    case: &str,
    dir: &std::path::Path,
    outcome: Result<String, String>,
    words: &[&str],
    failed: &mut Vec<String>,
) {
    match outcome {
        Ok(e)
            if words
                .iter()
                .all(|w| e.replace(dir.to_str().unwrap(), "").contains(w)) =>
        {
            eprintln!("{case}: {e}")
        }
        Ok(e) => failed.push(format!("{case}: {e}")),
        Err(why) => failed.push(format!("{case}: {why}")),
    }
}
