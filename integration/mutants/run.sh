#!/usr/bin/env bash
# make mutants: applies each realistic bug of the catalogue (*.patch here)
# to a copy of the tree and runs the failpoint sweep's cases that must
# catch it; fails unless every mutant is killed. A mutant's header names
#   Cases: the SWEEP_ONLY regular expression of the cases that must fail
#   Ops:   the SWEEP_OPS expression of the operations they belong to
#   Slice: yes when make test's slice kills it (the run then uses the slice)
# MUTANTS=regexp runs the mutants whose file names match; the table it
# prints (mutant, verdict, the oracle rules that fired, the first
# violation, seconds) goes to docs/guarantees.md by hand.
set -uo pipefail
cd "$(dirname "$0")/../.."
root=$PWD
filter=${MUTANTS:-.}
: "${TEST_DATABASE_URL:=postgres://postgres:postgres@127.0.0.1:5432/postgres?sslmode=disable}"
export TEST_DATABASE_URL
export PATH="$root/.tools/stripe-mock@v0.190.0:$PATH"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
printf '| mutant | verdict | rules | first violation | s |\n|---|---|---|---|--:|\n'
survivors=0
for patch in integration/mutants/*.patch; do
	name=$(basename "$patch" .patch)
	[[ $name =~ $filter ]] || continue
	header() { sed -n "s/^$1: *//p" "$patch" | head -n 1; }
	cases=$(header Cases); ops=$(header Ops); slice=$(header Slice)
	tree="$work/$name"
	mkdir -p "$tree"
	git ls-files -z --cached --others --exclude-standard | xargs -0 cp --parents -t "$tree"
	if ! (cd "$tree" && git apply --unidiff-zero "$root/$patch"); then
		printf '| %s | does not apply | | | |\n' "$name"; survivors=$((survivors + 1)); continue
	fi
	start=$(date +%s)
	log="$work/$name.log"
	sweep() { # sweep full|slice: the cases, in the full sweep or in make test's slice
		local planned=$ops
		[[ $1 == slice ]] && planned="" # the slice is planned over every operation
		(cd "$tree" && SWEEP=$1 SWEEP_OPS="$planned" SWEEP_ONLY="$cases" SWEEP_SHARDS="${SWEEP_SHARDS:-2}" \
			go test -count=1 -run '^TestFailpointSweep$' -timeout 30m ./integration/ >"$log" 2>&1)
	}
	sweep=full
	if [[ $slice == yes ]]; then
		sweep=slice
		sweep slice
		status=$?
		grep -q 'oracle [0-9]' "$log" || { sweep=full; sweep full; status=$?; }
	else
		sweep full
		status=$?
	fi
	secs=$(( $(date +%s) - start ))
	rules=$(grep -o 'oracle [0-9]' "$log" | sort -u | tr '\n' ' ' | sed 's/oracle //g; s/ $//')
	first=$(grep -m1 -o 'oracle [0-9]: .*' "$log" | cut -c1-140 | tr '|' '/')
	if [[ $status -ne 0 && -n $rules ]]; then
		verdict="killed by the $([[ $sweep == slice ]] && echo slice || echo full sweep)"
	else
		verdict="SURVIVED"; survivors=$((survivors + 1))
		[[ $status -ne 0 ]] && verdict="FAILED OTHERWISE (see $name.log)" && cp "$log" "/tmp/mutant-$name.log"
	fi
	printf '| %s | %s | %s | %s | %d |\n' "$name" "$verdict" "$rules" "$first" "$secs"
	rm -rf "$tree"
done
if [[ $survivors -gt 0 ]]; then
	echo "$survivors mutant(s) not killed"
	exit 1
fi
