# bash completion for plancc, plandump and planrun (installed as
# share/bash-completion/completions/{plancc,plandump,planrun}).
#
# The options come from the program's own --help, so they never drift from it; --cluster also
# completes the names of the installed clusters (plancc finds them by name), files complete where
# an option takes a file, and JSON Lines, CSV and SVG outputs where planrun writes them.

_plancc_options() {
    "$1" --help 2>/dev/null | grep -oE -- '--[a-z0-9][a-z0-9-]*' | sort -u
}

_plancc_clusters() {
    local bin dir
    bin=$(command -v "$1" 2>/dev/null) || return
    for dir in "${PLANCC_CLUSTERS:-}" "$(dirname "$bin")/../share/plancc/clusters"; do
        [ -d "$dir" ] && for f in "$dir"/*.json; do [ -e "$f" ] && basename "$f" .json; done
    done
}

_plancc_complete() {
    local cur prev
    cur=${COMP_WORDS[COMP_CWORD]}
    prev=${COMP_WORDS[COMP_CWORD - 1]}
    case "$prev" in
        --cluster)
            COMPREPLY=($(compgen -W "$(_plancc_clusters "$1")" -- "$cur") $(compgen -f -X '!*.json' -- "$cur"))
            return ;;
        --recompute) COMPREPLY=($(compgen -W "none full auto" -- "$cur")); return ;;
        --recompute-granularity) COMPREPLY=($(compgen -W "full selective" -- "$cur")); return ;;
        --schedule) COMPREPLY=($(compgen -W "gpipe 1f1b" -- "$cur")); return ;;
        --backend) COMPREPLY=($(compgen -W "cpu cpu-serial cuda" -- "$cur")); return ;;
        --precision) COMPREPLY=($(compgen -W "f32 f64" -- "$cur")); return ;;
        --config|--model|--data|--load|--save|--compare|--losses|--metrics|--plot|--trace|--svg|--background|--assemble|-o|--output|--dump-ilp)
            COMPREPLY=($(compgen -f -- "$cur")); return ;;
    esac
    if [[ "$cur" == -* ]]; then
        COMPREPLY=($(compgen -W "$(_plancc_options "$1")" -- "$cur"))
    else
        COMPREPLY=($(compgen -f -- "$cur"))
    fi
}

complete -o filenames -F _plancc_complete plancc plandump planrun
