//! Recurrent layers: LSTM, GRU, RNN.

use super::OpRule;

/// The rule for `op_type`, if it is a recurrent layer.
pub fn rule(_op_type: &str) -> Option<&'static dyn OpRule> {
    None
}
