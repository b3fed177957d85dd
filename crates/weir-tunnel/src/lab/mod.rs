//! `weir lab wan`.
