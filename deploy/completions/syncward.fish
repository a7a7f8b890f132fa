complete --keep-order --exclusive --command syncward --arguments "(COMPLETE=fish syncward -- (commandline --current-process --tokenize --cut-at-cursor) (commandline --current-token))"
