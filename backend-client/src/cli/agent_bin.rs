//! Finding the lab-agent binary (owned by the [payload] work; `try` uses it too).
