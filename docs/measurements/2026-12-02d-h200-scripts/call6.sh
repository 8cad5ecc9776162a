source .device/common.sh
t sweep; bash $D/sweep3.sh "512 11008 2048 q4_k" "512 2048 11008 q6_k" "512 2048 11008 q4_k" "512 2048 2048 q4_k --bias" "64 11008 2048 q4_k"; t done
