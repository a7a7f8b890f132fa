//! The commands' standard output. `println!` panics when the reader has gone
//! (`syncward runs list | head -3`); these macros instead stop writing and
//! remember why, so the command finishes its work (a foreground run is never
//! cut short by a closed pipe) and `main` decides: a reader that went away is
//! a quiet exit, any other write failure an error.

use std::fmt;
use std::io::{self, Write};
use std::sync::Mutex;

/// The first write failure; once set, nothing more is written.
static FAILURE: Mutex<Option<io::Error>> = Mutex::new(None);

/// `println!` to stdout through `write`.
macro_rules! outln {
    ($($arg:tt)*) => {
        $crate::commands::output::write(format_args!("{}\n", format_args!($($arg)*)))
    };
}

/// `print!` to stdout through `write`.
macro_rules! out {
    ($($arg:tt)*) => {
        $crate::commands::output::write(format_args!($($arg)*))
    };
}

pub(crate) use {out, outln};

/// Writes to stdout unless an earlier write failed; a failure is kept for
/// `take_failure` instead of panicking.
pub fn write(args: fmt::Arguments<'_>) {
    // Poisoned only by a panic while holding a plain Option: the value is whole.
    let mut failure = FAILURE.lock().unwrap_or_else(|e| e.into_inner());
    if failure.is_some() {
        return;
    }
    let mut stdout = io::stdout().lock();
    if let Err(e) = stdout.write_fmt(args).and_then(|()| stdout.flush()) {
        *failure = Some(e);
    }
}

/// How writing to stdout failed, if it did (for `main`, once the command has
/// ended). `ErrorKind::BrokenPipe` means the reader closed the pipe.
pub fn take_failure() -> Option<io::Error> {
    FAILURE.lock().unwrap_or_else(|e| e.into_inner()).take()
}
