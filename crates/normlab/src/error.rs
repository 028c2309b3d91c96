//! normlab's one error type. It separates what the user can fix (bad
//! input: an option value, a malformed or mismatched file; the CLI exits 2)
//! from failures of the machine (a read or write the OS refused: disk full,
//! a file where a folder must be; exit 1, with the path and the OS error)
//! and from normlab's own bugs (exit 1).

use std::path::{Path, PathBuf};

/// Every error the library returns.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// Input the user can fix; the message is one line.
    #[error("{0}")]
    BadInput(String),
    /// The OS refused a read or write of `path`.
    #[error("cannot {action} {}: {os}", path.display())]
    Io {
        /// What was attempted (`write`, `create`, `read`, ...).
        action: &'static str,
        /// The file or folder.
        path: PathBuf,
        /// The OS error (in the message, so not also a `source`).
        os: std::io::Error,
    },
    /// A failure that is normlab's fault, not the input's.
    #[error("internal error: {0}")]
    Internal(String),
    /// Stopped on request (SIGINT/SIGTERM) after saving what resumes it.
    #[error("{0}")]
    Interrupted(String),
}

/// `Result` with [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;

impl Error {
    /// Bad input with this message.
    pub fn bad(msg: impl Into<String>) -> Error {
        Error::BadInput(msg.into())
    }

    /// An I/O failure of `action` on `path`.
    pub fn io(action: &'static str, path: &Path, os: std::io::Error) -> Error {
        Error::Io {
            action,
            path: path.to_path_buf(),
            os,
        }
    }

    /// A failed read of a file the user named: a missing file, a folder
    /// given for a file or unreadable contents are bad input; anything else
    /// (an I/O error of the device) is an I/O failure.
    pub fn read(path: &Path, source: std::io::Error) -> Error {
        use std::io::ErrorKind as K;
        match source.kind() {
            K::NotFound | K::IsADirectory | K::NotADirectory | K::InvalidData => {
                Error::BadInput(format!("cannot read {}: {source}", path.display()))
            }
            _ => Error::io("read", path, source),
        }
    }

    /// The same error with `what: ` before its message (an I/O error keeps
    /// its path and OS error, and stays an I/O error).
    pub fn within(self, what: &str) -> Error {
        match self {
            Error::BadInput(m) => Error::BadInput(format!("{what}: {m}")),
            Error::Internal(m) => Error::Internal(format!("{what}: {m}")),
            other => other,
        }
    }

    /// Whether the user can fix it (the CLI's exit code 2).
    pub fn is_bad_input(&self) -> bool {
        matches!(self, Error::BadInput(_))
    }
}

/// Validation messages built as strings are bad input.
impl From<String> for Error {
    fn from(msg: String) -> Error {
        Error::BadInput(msg)
    }
}

impl From<&str> for Error {
    fn from(msg: &str) -> Error {
        Error::BadInput(msg.to_string())
    }
}
