"""Views for people every wing uses: tables (`tables`), progress (`progress`) and the graph as
status shows it (`graph_status`). They read through the stores and never write."""
