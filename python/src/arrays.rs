//! How the bridge reads a NumPy array in place: only a real
//! `numpy.ndarray` is accepted (the `numpy` crate's check, NumPy's own
//! `PyArray_Check`), and its buffer, element count, element type,
//! contiguity, writability and alignment are read from the array object
//! itself, never from a description the caller could forge
//! (`__array_interface__`), and checked, with the outputs' overlap, before
//! any memory is touched. No address or size crosses from Python.

use numpy::npyffi::{NPY_ARRAY_ALIGNED, NPY_ARRAY_WRITEABLE};
use numpy::{PyArrayDescr, PyArrayDescrMethods, PyUntypedArray, PyUntypedArrayMethods};
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

/// Whether a NumPy element type is `t`'s storage: f32 a float of 4 bytes,
/// f16 a float of 2, bf16 (viewed as int16 or uint16) an integer of 2, in
/// the machine's byte order.
fn stores(dt: &Bound<'_, PyArrayDescr>, t: Dtype) -> bool {
    let native = matches!(dt.byteorder(), b'=' | b'|')
        || (dt.byteorder() == b'<') == cfg!(target_endian = "little");
    let kind_ok = match t {
        Dtype::F32 | Dtype::F16 => dt.kind() == b'f',
        Dtype::Bf16 => matches!(dt.kind(), b'i' | b'u'),
    };
    native && kind_ok && dt.itemsize() == t.size()
}

/// The names NumPy gives `t`'s storage (for messages).
fn expected(t: Dtype) -> &'static str {
    match t {
        Dtype::F32 => "float32",
        Dtype::F16 => "float16",
        Dtype::Bf16 => "int16 or uint16 (a bfloat16 tensor's view)",
    }
}

/// The ndarray `obj` is, or a ValueError: only NumPy arrays are read (a
/// tensor reaches the bridge as its `.numpy()` view), never an object that
/// only describes a buffer (`__array_interface__`, the buffer protocol),
/// whose address and size the caller would control.
fn ndarray<'a, 'py>(
    obj: &'a Bound<'py, PyAny>,
    what: &str,
) -> PyResult<&'a Bound<'py, PyUntypedArray>> {
    obj.cast::<PyUntypedArray>().map_err(|_| {
        PyValueError::new_err(format!(
            "{what}: not a NumPy array (a numpy.ndarray, or a tensor's .numpy() view), but {}",
            obj.get_type()
                .name()
                .map_or_else(|_| "an unknown type".to_string(), |n| n.to_string())
        ))
    })
}

/// Locate `what`'s buffer from the ndarray itself (its data pointer, shape,
/// strides and flags, as NumPy keeps them): C-contiguous, of element type
/// `t` and `len` elements, writable when `out`, aligned.
pub(crate) fn array(
    obj: &Bound<'_, PyAny>,
    what: &str,
    t: Dtype,
    len: usize,
    out: bool,
) -> PyResult<Buf> {
    let bad = |m: String| PyValueError::new_err(format!("{what}: {m}"));
    let arr = ndarray(obj, what)?;
    let dt = arr.dtype();
    if !stores(&dt, t) {
        return Err(bad(format!("element type {dt}, expected {}", expected(t))));
    }
    let n = arr.len();
    if n != len {
        return Err(bad(format!("{n} elements, expected {len}")));
    }
    if !arr.is_c_contiguous() {
        return Err(bad("not C-contiguous".into()));
    }
    // SAFETY: `arr` is a live ndarray (checked by the cast above); its
    // object struct is NumPy's and is only read here.
    let (addr, flags) = unsafe {
        let p = arr.as_array_ptr();
        ((*p).fields.data as usize, (*p).fields.flags)
    };
    if out && flags & NPY_ARRAY_WRITEABLE == 0 {
        return Err(bad("read-only".into()));
    }
    if n > 0 && (addr == 0 || flags & NPY_ARRAY_ALIGNED == 0 || !addr.is_multiple_of(t.size())) {
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

/// Elements of an ndarray, read from the array itself.
pub(crate) fn size(obj: &Bound<'_, PyAny>, what: &str) -> PyResult<usize> {
    Ok(ndarray(obj, what)?.len())
}
