//! The compiler IR (to be written).
