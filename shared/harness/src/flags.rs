//! The benchmark bins' flags (`--name value`): a value that does not parse stops the bin with an
//! error naming the flag, rather than running with the default unnoticed.

use std::str::FromStr;

/// The value after `name` on the command line, or `default` when the flag is absent.
pub fn value<T: FromStr>(name: &str, default: T) -> T {
    let args: Vec<String> = std::env::args().collect();
    let Some(text) = args.iter().position(|a| a == name).map(|i| args.get(i + 1)) else {
        return default;
    };
    match text.map(|t| (t, t.parse::<T>())) {
        Some((_, Ok(v))) => v,
        Some((t, Err(_))) => {
            eprintln!("{name} {t:?}: not a valid value");
            std::process::exit(2);
        }
        None => {
            eprintln!("{name} needs a value");
            std::process::exit(2);
        }
    }
}
