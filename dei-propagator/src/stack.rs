//! Call stacks as part of an invocation signature (the `t` of `s(p)^t`).
//!
//! Capturing a stack is instrumentation's job (`dei-instrumentation::stack`); this module holds the model:
//! application frames keyed by (workspace-relative file, line, column), with function names kept for display
//! only.

use crate::digest::StackDigest;
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use std::fmt;

/// One application frame of a call stack.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Frame {
    /// Source file relative to the workspace, with `/` separators.
    pub file: String,
    /// 1-based line.
    pub line: u32,
    /// 1-based column, 0 where unknown.
    pub column: u32,
    /// Function name, for display only: it never takes part in identity.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub function: Option<String>,
}

impl Frame {
    /// A frame at `file:line:column`.
    pub fn new(file: impl Into<String>, line: u32, column: u32) -> Self {
        Frame {
            file: file.into(),
            line,
            column,
            function: None,
        }
    }

    /// The same frame with a function name for display.
    pub fn with_function(mut self, function: impl Into<String>) -> Self {
        self.function = Some(function.into());
        self
    }
}

impl fmt::Display for Frame {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.function {
            Some(func) => write!(f, "{func} ({}:{}:{})", self.file, self.line, self.column),
            None => write!(f, "{}:{}:{}", self.file, self.line, self.column),
        }
    }
}

/// The application frames of a call stack, innermost first.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct CallStack {
    /// Frames, innermost first.
    pub frames: Vec<Frame>,
}

impl CallStack {
    /// A stack of the given frames, innermost first.
    pub fn new(frames: Vec<Frame>) -> Self {
        CallStack { frames }
    }

    /// The stack's identity: SHA-256 over `file:line:column\n` for each frame, innermost first.
    ///
    /// ```
    /// use dei_propagator::{CallStack, Frame};
    /// let a = CallStack::new(vec![Frame::new("src/a.rs", 10, 5).with_function("echo")]);
    /// let b = CallStack::new(vec![Frame::new("src/a.rs", 10, 5).with_function("renamed")]);
    /// assert_eq!(a.digest(), b.digest()); // function names are for display only
    /// ```
    pub fn digest(&self) -> StackDigest {
        let mut h = Sha256::new();
        for frame in &self.frames {
            h.update(frame.file.as_bytes());
            h.update(format!(":{}:{}\n", frame.line, frame.column).as_bytes());
        }
        StackDigest(h.finalize().into())
    }

    /// Readable frames, one per line, innermost first (the `dei.stack` span attribute).
    pub fn to_readable(&self) -> String {
        let mut out = String::new();
        for (i, frame) in self.frames.iter().enumerate() {
            if i > 0 {
                out.push('\n');
            }
            out.push_str(&frame.to_string());
        }
        out
    }
}
