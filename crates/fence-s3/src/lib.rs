//! fence-s3 (work in progress).
