"""What a TensorBoardMonitor does with one training: its options, the run it opens (the folder agreed
across ranks, the writers, the router), each logged step, the end. Callbacks hand their hook calls here."""
