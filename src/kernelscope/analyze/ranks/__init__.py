"""Several ranks of one run: the ranks on one clock, the processes of one recording as ranks, collectives matched across ranks, runtime calls that launched nothing."""
