//! Files: atomic writes (temp name, fsync, rename; no temp file left
//! behind on failure), reads with errors that say whether the user or the
//! machine is at fault, model files memory-mapped ([`map`]), checkpoint tensors in safetensors (Hugging
//! Face-style names, f32), and the text corpus normlab ships.

use crate::error::{Error, Result};
use crate::params::ParamLayout;
use safetensors::tensor::{Dtype, SafeTensors, TensorView};
use std::collections::HashMap;
use std::fs;
use std::io::Write;
use std::path::Path;

/// The Shakespeare text bundled with normlab (see data/README.md).
pub const BUNDLED_TEXT: &[u8] = include_bytes!("../../../data/shakespeare.txt");

/// Sentences for calibration and held-out checks: lines of the bundled
/// Shakespeare with 6 to 40 words (`skip` lines first, every `step`-th).
pub fn sample_sentences(count: usize, skip: usize, step: usize) -> Vec<String> {
    let text = String::from_utf8_lossy(BUNDLED_TEXT);
    text.lines()
        .map(str::trim)
        .filter(|l| {
            let w = l.split_whitespace().count();
            (6..=40).contains(&w) && !l.chars().all(|c| c.is_uppercase() || !c.is_alphabetic())
        })
        .skip(skip)
        .step_by(step.max(1))
        .take(count)
        .map(String::from)
        .collect()
}

/// The temp name a write of `path` by this process uses: `.<name>.<pid>.tmp`
/// in the same folder (so the rename is atomic).
fn temp_name(path: &Path) -> std::path::PathBuf {
    let dir = path.parent().unwrap_or(Path::new("."));
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    dir.join(format!(".{name}.{}.tmp", std::process::id()))
}

/// Whether `name` is a temp file of [`atomic_write`] (of any process).
pub fn is_temp_name(name: &str) -> bool {
    name.starts_with('.') && name.ends_with(".tmp")
}

/// Write `bytes` to `path` atomically: a temp file in the same folder,
/// fsync, rename over the target, fsync the folder. On failure the temp file
/// is removed and `path` is untouched; the error names the path and the OS
/// error.
pub fn atomic_write(path: &Path, bytes: &[u8]) -> Result<()> {
    let tmp = temp_name(path);
    let written = (|| {
        let mut f = fs::File::create(&tmp)?;
        f.write_all(bytes)?;
        f.sync_all()?;
        fs::rename(&tmp, path)
    })();
    if let Err(e) = written {
        let _ = fs::remove_file(&tmp);
        return Err(Error::io("write", path, e));
    }
    if let Some(dir) = path.parent() {
        if let Ok(d) = fs::File::open(if dir.as_os_str().is_empty() {
            Path::new(".")
        } else {
            dir
        }) {
            let _ = d.sync_all();
        }
    }
    Ok(())
}

/// Create a folder and its parents.
pub fn create_dir_all(path: &Path) -> Result<()> {
    fs::create_dir_all(path).map_err(|e| Error::io("create", path, e))
}

/// Refuse what is not a regular file before reading it whole: a FIFO
/// would block forever and `/dev/zero` never ends.
fn check_regular(path: &Path) -> Result<()> {
    let meta = fs::metadata(path).map_err(|e| Error::read(path, e))?;
    if !meta.is_file() {
        return Err(Error::bad(format!(
            "{} is not a regular file",
            path.display()
        )));
    }
    Ok(())
}

/// A whole file's bytes: memory-mapped on Unix ([`map`]: its pages are the
/// page cache's, read on demand, never copied into the process), or held.
pub struct FileBytes(Bytes);

enum Bytes {
    #[cfg(unix)]
    Mapped(memmap2::Mmap),
    Held(Vec<u8>),
}

impl std::ops::Deref for FileBytes {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        match &self.0 {
            #[cfg(unix)]
            Bytes::Mapped(m) => m,
            Bytes::Held(v) => v,
        }
    }
}

impl From<Vec<u8>> for FileBytes {
    fn from(v: Vec<u8>) -> FileBytes {
        FileBytes(Bytes::Held(v))
    }
}

impl FileBytes {
    /// Whether the bytes are a mapping of the file (not held in the
    /// process's own memory).
    pub fn mapped(&self) -> bool {
        !matches!(self.0, Bytes::Held(_))
    }
}

/// A regular file's bytes, memory-mapped where the platform maps files
/// (elsewhere read): a model's weights file is then not held in memory a
/// second time beside the weights made from it. A FIFO or a device is
/// refused, as by [`read`].
pub fn map(path: &Path) -> Result<FileBytes> {
    check_regular(path)?;
    #[cfg(unix)]
    {
        let f = fs::File::open(path).map_err(|e| Error::read(path, e))?;
        // SAFETY: a read-only private mapping of a regular file, read only
        // through the returned slice. Another process truncating the file
        // while it is mapped would fault the reader, the risk every tool
        // that maps model files takes (safetensors, llama.cpp).
        let m = unsafe { memmap2::Mmap::map(&f) }.map_err(|e| Error::read(path, e))?;
        Ok(FileBytes(Bytes::Mapped(m)))
    }
    #[cfg(not(unix))]
    {
        read(path).map(FileBytes::from)
    }
}

/// Read a whole regular file (a missing file is bad input, see
/// [`Error::read`]; a FIFO or a device is refused).
pub fn read(path: &Path) -> Result<Vec<u8>> {
    check_regular(path)?;
    fs::read(path).map_err(|e| Error::read(path, e))
}

/// Read a file someone else's folder holds (a book chapter's result.json
/// or figure): only a regular file, never through a symbolic link (a
/// chapter listing `pw.svg -> /etc/passwd` must not serve it), opened
/// without blocking (a FIFO is refused, not waited on), and at most `cap`
/// bytes (`/dev/zero` or a 300 MB file is refused, not read).
pub fn read_capped(path: &Path, cap: u64) -> Result<Vec<u8>> {
    use std::io::Read;
    let link = fs::symlink_metadata(path).map_err(|e| Error::read(path, e))?;
    if link.file_type().is_symlink() {
        return Err(Error::bad(format!(
            "{} is a symbolic link (not followed)",
            path.display()
        )));
    }
    let mut opts = fs::OpenOptions::new();
    opts.read(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt;
        opts.custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK);
    }
    let f = opts.open(path).map_err(|e| Error::read(path, e))?;
    let meta = f.metadata().map_err(|e| Error::read(path, e))?;
    if !meta.is_file() {
        return Err(Error::bad(format!(
            "{} is not a regular file",
            path.display()
        )));
    }
    if meta.len() > cap {
        return Err(Error::bad(format!(
            "{} is {} bytes, more than the {cap} read",
            path.display(),
            meta.len()
        )));
    }
    let mut out = Vec::with_capacity(meta.len() as usize);
    f.take(cap + 1)
        .read_to_end(&mut out)
        .map_err(|e| Error::read(path, e))?;
    if out.len() as u64 > cap {
        return Err(Error::bad(format!(
            "{} grew past the {cap} bytes read",
            path.display()
        )));
    }
    Ok(out)
}

/// Read a whole regular file of at most `cap` bytes, following links (a
/// Hugging Face cache's files are links into its blobs): a larger file is
/// refused from its size, before it is read; a FIFO or a device is refused.
pub fn read_at_most(path: &Path, cap: u64) -> Result<Vec<u8>> {
    use std::io::Read;
    check_regular(path)?;
    let f = fs::File::open(path).map_err(|e| Error::read(path, e))?;
    let len = f.metadata().map_err(|e| Error::read(path, e))?.len();
    let too_big = |len: u64| {
        Error::bad(format!(
            "{} is {len} bytes, more than the {} normlab reads of it",
            path.display(),
            crate::limits::human_bytes(cap as f64)
        ))
    };
    if len > cap {
        return Err(too_big(len));
    }
    let mut out = Vec::with_capacity(len as usize);
    f.take(cap + 1)
        .read_to_end(&mut out)
        .map_err(|e| Error::read(path, e))?;
    if out.len() as u64 > cap {
        return Err(too_big(out.len() as u64));
    }
    Ok(out)
}

/// Read a whole regular UTF-8 text file.
pub fn read_to_string(path: &Path) -> Result<String> {
    check_regular(path)?;
    fs::read_to_string(path).map_err(|e| Error::read(path, e))
}

/// Remove the temp files a killed writer left in `dir` (the files they were
/// meant to replace are intact: writes are atomic).
pub fn remove_stale_temp_files(dir: &Path) {
    if let Ok(entries) = fs::read_dir(dir) {
        for e in entries.flatten() {
            if is_temp_name(&e.file_name().to_string_lossy()) {
                let _ = fs::remove_file(e.path());
            }
        }
    }
}

fn f32_bytes(v: &[f32]) -> Vec<u8> {
    v.iter().flat_map(|x| x.to_le_bytes()).collect()
}

/// Serialise the tensors of `layout` from each buffer of `bufs` (names
/// prefixed by the buffer's prefix), with `metadata`.
pub fn safetensors_bytes(
    layout: &ParamLayout,
    bufs: &[(&str, &[f32])],
    metadata: HashMap<String, String>,
) -> Result<Vec<u8>> {
    let mut owned: Vec<(String, Vec<usize>, Vec<u8>)> = Vec::new();
    for (prefix, buf) in bufs {
        for t in &layout.tensors {
            owned.push((
                format!("{prefix}{}", t.name),
                t.shape.clone(),
                f32_bytes(&buf[t.range.clone()]),
            ));
        }
    }
    let views: Vec<(String, TensorView)> = owned
        .iter()
        .map(|(n, s, b)| {
            Ok((
                n.clone(),
                TensorView::new(Dtype::F32, s.clone(), b)
                    .map_err(|e| Error::Internal(e.to_string()))?,
            ))
        })
        .collect::<Result<_>>()?;
    safetensors::tensor::serialize(views, Some(metadata))
        .map_err(|e| Error::Internal(e.to_string()))
}

/// Read tensors named `prefix + name` for every tensor of `layout` into
/// `buf`; `what` names the file in errors.
pub fn load_tensors(
    bytes: &[u8],
    layout: &ParamLayout,
    prefix: &str,
    buf: &mut [f32],
    what: &str,
) -> Result<()> {
    let st = SafeTensors::deserialize(bytes)
        .map_err(|e| format!("{what} is not a valid safetensors file: {e}"))?;
    for t in &layout.tensors {
        let name = format!("{prefix}{}", t.name);
        let view = st.tensor(&name).map_err(|_| {
            format!("{what} has no tensor '{name}' (is it from a different model config?)")
        })?;
        if view.dtype() != Dtype::F32 || view.shape() != t.shape.as_slice() {
            return Err(Error::bad(format!(
                "{what}: tensor '{name}' has {:?} {:?}, expected F32 {:?}",
                view.dtype(),
                view.shape(),
                t.shape
            )));
        }
        for (dst, chunk) in buf[t.range.clone()]
            .iter_mut()
            .zip(view.data().chunks_exact(4))
        {
            *dst = f32::from_le_bytes(chunk.try_into().unwrap());
        }
    }
    Ok(())
}

/// The checksum normlab records for a file's contents: CRC-32 of `parts`
/// in order, as "crc32:xxxxxxxx" (a flipped bit always changes it).
pub fn checksum(parts: &[&[u8]]) -> String {
    let mut h = crc32fast::Hasher::new();
    for p in parts {
        h.update(p);
    }
    format!("crc32:{:08x}", h.finalize())
}

/// The data section of a safetensors file (the tensors' bytes, after the
/// header); empty when the header's length does not fit the file.
pub fn safetensors_data(bytes: &[u8]) -> &[u8] {
    let Some(len) = bytes.get(..8) else {
        return &[];
    };
    let n = u64::from_le_bytes(len.try_into().expect("8 bytes"));
    usize::try_from(n)
        .ok()
        .and_then(|n| n.checked_add(8))
        .and_then(|start| bytes.get(start..))
        .unwrap_or(&[])
}

/// Metadata of a safetensors file.
pub fn read_metadata(bytes: &[u8], what: &str) -> Result<HashMap<String, String>> {
    let (_, meta) = SafeTensors::read_metadata(bytes)
        .map_err(|e| format!("{what} is not a valid safetensors file: {e}"))?;
    Ok(meta.metadata().clone().unwrap_or_default())
}

#[cfg(test)]
mod tests {

    /// A FIFO and a device are refused at once (they blocked or read until
    /// memory ran out).
    #[test]
    fn only_regular_files_are_read_whole() {
        for p in ["/dev/zero", "/dev/null"] {
            let e = read(Path::new(p)).err().unwrap().to_string();
            assert!(e.contains("not a regular file"), "{e}");
        }
        let dir = std::env::temp_dir().join(format!("normlab-fifo-{}", std::process::id()));
        fs::create_dir_all(&dir).unwrap();
        let fifo = dir.join("fifo");
        let c = std::ffi::CString::new(fifo.to_str().unwrap()).unwrap();
        // SAFETY: mkfifo with a valid NUL-terminated path.
        if unsafe { libc::mkfifo(c.as_ptr(), 0o600) } == 0 {
            let e = read_to_string(&fifo).err().unwrap().to_string();
            assert!(e.contains("not a regular file"), "{e}");
        }
        let _ = fs::remove_dir_all(&dir);
    }
    use super::*;

    #[test]
    fn failed_write_leaves_nothing_and_names_the_path() {
        let dir = std::env::temp_dir().join(format!("normlab-io-{}", std::process::id()));
        let _ = fs::remove_dir_all(&dir);
        fs::create_dir_all(&dir).unwrap();
        // A file where a folder must be: the write fails with ENOTDIR.
        let blocker = dir.join("blocker");
        fs::write(&blocker, b"x").unwrap();
        let e = atomic_write(&blocker.join("out.json"), b"{}").unwrap_err();
        assert!(!e.is_bad_input(), "{e}");
        assert!(e.to_string().contains("blocker/out.json"), "{e}");
        // A target that is a folder: the rename fails; the temp file is gone.
        let target = dir.join("target");
        fs::create_dir_all(target.join("inner")).unwrap();
        let e = atomic_write(&target, b"data").unwrap_err();
        assert!(
            matches!(
                e,
                Error::Io {
                    action: "write",
                    ..
                }
            ),
            "{e}"
        );
        let left: Vec<_> = fs::read_dir(&dir)
            .unwrap()
            .flatten()
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .filter(|n| is_temp_name(n))
            .collect();
        assert!(left.is_empty(), "temp files left: {left:?}");
        atomic_write(&dir.join("ok.txt"), b"fine").unwrap();
        assert_eq!(fs::read(dir.join("ok.txt")).unwrap(), b"fine");
        assert!(read(&dir.join("missing")).unwrap_err().is_bad_input());
        let _ = fs::remove_dir_all(&dir);
    }
}
