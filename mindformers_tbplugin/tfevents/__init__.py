"""TensorBoard's file format, both ways, knowing nothing of training: record framing (records),
the events written (events, with wire), the file, writer thread and per-process registry
(event_file, writer, registry), reading back (reader) and run folders (run_folders)."""
