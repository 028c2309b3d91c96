//! The thread pools the bridge runs the library in: one rayon pool per
//! thread count asked for, built once, within the library's cap on threads.

use pyo3::exceptions::PyValueError;
use pyo3::PyResult;
use rayon::{ThreadPool, ThreadPoolBuilder};
use std::sync::{Arc, Mutex};

/// One rayon pool per thread count asked for, built once.
static POOLS: Mutex<Vec<(usize, Arc<ThreadPool>)>> = Mutex::new(Vec::new());

pub(crate) fn pool(threads: usize) -> PyResult<Arc<ThreadPool>> {
    // The library's one cap on threads (the CLI's too).
    normlab::limits::check_threads("threads", threads)
        .map_err(|e| PyValueError::new_err(e.to_string()))?;
    let mut pools = POOLS.lock().unwrap_or_else(|e| e.into_inner());
    if let Some((_, p)) = pools.iter().find(|(n, _)| *n == threads) {
        return Ok(p.clone());
    }
    let p = ThreadPoolBuilder::new()
        .num_threads(threads)
        .thread_name(|i| format!("normlab-{i}"))
        .build()
        .map_err(|e| PyValueError::new_err(format!("cannot start {threads} threads: {e}")))?;
    let p = Arc::new(p);
    pools.push((threads, p.clone()));
    Ok(p)
}
