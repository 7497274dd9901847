//! Passes over the IR (to be written).
