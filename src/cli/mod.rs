pub mod crd;
pub mod plan;
pub mod rules;
pub mod simulate;
pub mod status;
pub mod uninstall;

/// Writes `text` to stdout; a reader that went away (`... | head`) is not an error worth a panic
/// or a message.
pub fn write_stdout(text: &str) -> anyhow::Result<()> {
    use std::io::Write as _;
    let mut stdout = std::io::stdout().lock();
    match stdout.write_all(text.as_bytes()).and_then(|()| stdout.flush()) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => Ok(()),
        Err(e) => Err(anyhow::anyhow!("cannot write to stdout: {e}")),
    }
}
