#!/usr/bin/env bash
# make demo prints each command as a user can paste it: scripts/demo.sh --quote gives the
# README's form for a prompt with spaces, and every printed line, pasted into a shell, gives back the
# exact words that ran (spaces, quotes, $, backslash, backquote, globs, empty words).
set -u
demo=${1:?usage: demo_quote.sh scripts/demo.sh}
fail=0
got=$(bash "$demo" --quote build/lpo generate backend=cpu 'prompt=What is the capital of France?')
want='build/lpo generate backend=cpu prompt="What is the capital of France?"'
if [ "$got" != "$want" ]; then echo "FAIL: got   $got"; echo "      want  $want"; fail=1; fi
words=(lpo x 'prompt=What is 2+2?' "a=it's \$HOME \"q\" \`x\` \\z" '' 'two words' '[1,2]' '*' 'k=v;rm' '~a.b' 'x=$(id)' 'prompt=Hi! it'"'"'s "me"')
line=$(bash "$demo" --quote "${words[@]}")
eval "back=($line)"
if [ "${#back[@]}" != "${#words[@]}" ]; then echo "FAIL: $line: ${#back[@]} words, not ${#words[@]}"; fail=1; fi
for i in "${!words[@]}"; do
  if [ "${back[$i]-}" != "${words[$i]}" ]; then echo "FAIL: word $i: '${back[$i]-}' != '${words[$i]}'"; fail=1; fi
done
[ "$fail" = 0 ] && echo "demo_quote: ok: $line"
exit "$fail"
