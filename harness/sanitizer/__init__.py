"""compute-sanitizer: build its command, parse its text and XML output, reduce records to findings."""
