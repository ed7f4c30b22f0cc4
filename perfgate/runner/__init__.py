"""The self-hosted runner's side: job hooks that leave every job a clean, idle, healthy machine
(`hooks`), the GPU checks they and `perfgate doctor` share (`gpus`), and the search for servers
earlier jobs left behind (`leftovers`)."""
