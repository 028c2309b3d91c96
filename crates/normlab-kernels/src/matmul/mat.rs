//! A strided view of a matrix ([`Mat`]): what the products read.

/// A read-only strided matrix view: element (i, j) is `data[i*rs + j*cs]`.
#[derive(Clone, Copy, Debug)]
pub struct Mat<'a> {
    /// Backing storage.
    pub data: &'a [f32],
    /// Rows.
    pub rows: usize,
    /// Columns.
    pub cols: usize,
    /// Row stride.
    pub rs: usize,
    /// Column stride.
    pub cs: usize,
}

impl<'a> Mat<'a> {
    /// A row-major `rows x cols` matrix.
    pub fn rows(data: &'a [f32], rows: usize, cols: usize) -> Mat<'a> {
        Mat {
            data,
            rows,
            cols,
            rs: cols,
            cs: 1,
        }
    }

    /// The transpose (a view, no copy).
    pub fn t(self) -> Mat<'a> {
        Mat {
            data: self.data,
            rows: self.cols,
            cols: self.rows,
            rs: self.cs,
            cs: self.rs,
        }
    }

    pub(super) fn check(&self, what: &str) {
        if self.rows > 0 && self.cols > 0 {
            let last = (self.rows - 1) * self.rs + (self.cols - 1) * self.cs;
            assert!(
                last < self.data.len(),
                "{what}: view {}x{} (rs {}, cs {}) exceeds {} floats",
                self.rows,
                self.cols,
                self.rs,
                self.cs,
                self.data.len()
            );
        }
    }
}
