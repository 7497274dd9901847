//! Loading models (to be written).
