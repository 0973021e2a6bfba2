# Reconstruction of DSSTNE's samples/movielens/convert_ratings.awk, written from its spec
# (the original is not available to us). Used only as a test oracle for
# scripts/convert_ratings.py: on a ratings.csv sorted by user it must give the same bytes.
#
# Input:  userId,movieId,rating,timestamp (MovieLens ratings.csv, header on line 1).
# Output: one line per run of rows with the same user, "user<TAB>movie,ts:movie,ts...".
#
# Usage: awk -f convert_ratings.awk ratings.csv > ratings.dsstne

BEGIN { FS = "," }

NR == 1 { next }  # the header

NR == 2 || $1 != user {
    if (NR > 2) printf "\n"
    user = $1
    printf "%s\t%s,%s", $1, $2, $4
    next
}

{ printf ":%s,%s", $2, $4 }

END { if (NR > 1) printf "\n" }
