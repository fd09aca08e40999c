mod allocs;
mod cli;
mod errors;
mod farmem;
mod processes;
mod stacks;
mod util;
mod wss;
