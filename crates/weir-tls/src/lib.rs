//! TLS for weir.
