#!/bin/sh
# bench/cpu.sh: one line naming this machine's CPU for a benchmark's header, since figures
# differ by CPU (the project's machines have been AMD EPYCs with and without AVX-512 and an
# Intel Xeon): the model name (virtual machines often show only "Intel(R) Xeon(R)
# Processor"), its family and model numbers, the widest vector unit and whether the carry-less
# multiply that the ICRC's folding uses is there in 512 bits (VPCLMULQDQ).
awk -F': ' '
	/^model name/ && !name { name = $2 }
	/^cpu family/ && !fam { fam = $2 }
	/^model[ \t]*:/ && !mod { mod = $2 }
	/^flags/ && !flags { flags = " " $2 " " }
	END {
		v = index(flags, " avx512f ") ? "AVX-512" : index(flags, " avx2 ") ? "AVX2, no AVX-512" : "no AVX2"
		if (index(flags, " vpclmulqdq ")) v = v ", VPCLMULQDQ"
		printf "%s (family %s model %s), %s\n", name, fam, mod, v
	}' /proc/cpuinfo
