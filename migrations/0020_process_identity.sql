-- Where a process runs, precisely enough to prove it dead without waiting
-- for its heartbeat: the machine's boot and pid namespace (Linux's
-- /proc/sys/kernel/random/boot_id and /proc/self/ns/pid: containers on one
-- kernel share the first, not the second) and the process's start time in
-- clock ticks since that boot (/proc/PID/stat, field 22). A holder registered
-- on this machine, boot and namespace whose pid is gone, or is another
-- process now (another start time), is dead at once; any other is judged by
-- its heartbeat.
ALTER TABLE processes
    ADD COLUMN machine_boot text,
    ADD COLUMN start_ticks bigint;
