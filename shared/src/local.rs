//! local
