mod cli;
mod errors;
mod processes;
mod stacks;
mod util;
