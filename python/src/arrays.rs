//! How the bridge reads a NumPy array in place: its buffer located from
//! the array's own `__array_interface__` and checked (element type,
//! C-contiguity, element count, writability, alignment, overlap) before
//! any memory is touched. No address crosses from Python.

use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;

/// A located array buffer: its address and element count.
#[derive(Clone, Copy)]
pub(crate) struct Buf {
    pub(crate) addr: usize,
    len: usize,
}

impl Buf {
    /// # Safety
    /// `self` must come from [`array`] with element type `T`, and its
    /// array must stay alive for the returned lifetime.
    pub(crate) unsafe fn slice<'a, T>(self) -> &'a [T] {
        if self.len == 0 {
            return &[];
        }
        std::slice::from_raw_parts(self.addr as *const T, self.len)
    }
    /// # Safety
    /// As [`Buf::slice`], and the array must be writable and overlap no
    /// other buffer of the call ([`disjoint`]).
    #[allow(clippy::mut_from_ref)]
    pub(crate) unsafe fn slice_mut<'a, T>(self) -> &'a mut [T] {
        if self.len == 0 {
            return &mut [];
        }
        std::slice::from_raw_parts_mut(self.addr as *mut T, self.len)
    }
    fn bytes(self, size: usize) -> std::ops::Range<usize> {
        self.addr..self.addr + self.len * size
    }
}

/// The typestrs NumPy gives an element of `size` bytes: f32 "<f4", f16
/// "<f2", bf16 (viewed as int16 or uint16) "<i2" / "<u2".
fn typestrs(t: Dtype) -> &'static [&'static str] {
    match t {
        Dtype::F32 => &["<f4"],
        Dtype::F16 => &["<f2"],
        Dtype::Bf16 => &["<i2", "<u2"],
    }
}

/// Locate `what`'s buffer from its own `__array_interface__`: C-contiguous,
/// of element type `t` and `len` elements, writable when `out`, aligned.
pub(crate) fn array(
    obj: &Bound<'_, PyAny>,
    what: &str,
    t: Dtype,
    len: usize,
    out: bool,
) -> PyResult<Buf> {
    let bad = |m: String| PyValueError::new_err(format!("{what}: {m}"));
    let ai = obj
        .getattr("__array_interface__")
        .map_err(|_| bad("not a NumPy array".into()))?;
    let typestr: String = ai.get_item("typestr")?.extract()?;
    if !typestrs(t).contains(&typestr.as_str()) {
        return Err(bad(format!(
            "element type {typestr}, expected {}",
            typestrs(t).join(" or ")
        )));
    }
    let shape: Vec<usize> = ai.get_item("shape")?.extract()?;
    let n = shape
        .iter()
        .try_fold(1usize, |a, &b| a.checked_mul(b))
        .ok_or_else(|| bad("shape overflows".into()))?;
    if n != len {
        return Err(bad(format!("{n} elements, expected {len}")));
    }
    let strides = ai.get_item("strides")?;
    if !strides.is_none() && n > 1 {
        // C-contiguous arrays may still give their strides: check them.
        let st: Vec<isize> = strides.extract()?;
        let mut want = t.size() as isize;
        for (k, &dim) in shape.iter().enumerate().rev() {
            if dim > 1 && st[k] != want {
                return Err(bad("not C-contiguous".into()));
            }
            want *= dim as isize;
        }
    }
    let (addr, readonly): (usize, bool) = ai.get_item("data")?.extract()?;
    if out && readonly {
        return Err(bad("read-only".into()));
    }
    if n > 0 && (addr == 0 || !addr.is_multiple_of(t.size())) {
        return Err(bad(format!(
            "buffer is null or not {}-byte aligned",
            t.size()
        )));
    }
    Ok(Buf { addr, len: n })
}

/// Outputs (with their element sizes) overlap neither each other nor any
/// input.
pub(crate) fn disjoint(outs: &[(Buf, usize, &str)], ins: &[(Buf, usize, &str)]) -> PyResult<()> {
    for (i, (o, so, wo)) in outs.iter().enumerate() {
        for (b, sb, wb) in outs[i + 1..].iter().chain(ins) {
            let (r1, r2) = (o.bytes(*so), b.bytes(*sb));
            if o.len > 0 && b.len > 0 && r1.start < r2.end && r2.start < r1.end {
                return Err(PyValueError::new_err(format!("{wo} overlaps {wb}")));
            }
        }
    }
    Ok(())
}

/// The storage type of x, y, dy, dx.
#[derive(Clone, Copy, PartialEq)]
pub(crate) enum Dtype {
    F32,
    Bf16,
    F16,
}

impl Dtype {
    pub(crate) fn parse(s: &str) -> PyResult<Dtype> {
        match s {
            "f32" => Ok(Dtype::F32),
            "bf16" => Ok(Dtype::Bf16),
            "f16" => Ok(Dtype::F16),
            _ => Err(PyValueError::new_err(format!(
                "dtype must be f32, bf16 or f16, not '{s}'"
            ))),
        }
    }
    pub(crate) fn size(self) -> usize {
        if self == Dtype::F32 {
            4
        } else {
            2
        }
    }
}

/// Elements of an array (its `size`).
pub(crate) fn size(obj: &Bound<'_, PyAny>, what: &str) -> PyResult<usize> {
    obj.getattr("size")
        .and_then(|v| v.extract())
        .map_err(|_| PyValueError::new_err(format!("{what}: not a NumPy array")))
}
